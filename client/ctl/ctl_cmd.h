/* tensorctl's commands: the entry points tensorctl.c dispatches to, one
 * group per command file. Each takes the parsed command line, returns an
 * exit status (CTL_EXIT_*) and has printed any error. A command file
 * implements only its own entries and uses nothing of another command
 * file: what two of them share is in ctl_common.h. */
#pragma once

#include "ctl_common.h"

/* ctl_commands.c: the daemon and single tensors. */
int ctl_cmd_ping(struct ctl *c);
int ctl_cmd_ls(struct ctl *c);
/* store.sync: write every changed tensor to the daemon's state directory. */
int ctl_cmd_sync(struct ctl *c);
int ctl_cmd_chmod(struct ctl *c);
int ctl_cmd_put(struct ctl *c);
/* copy SRC DST [--device ID] (alias cp): tensor.copy. */
int ctl_cmd_copy(struct ctl *c);

/* ctl_multi.c: stat, rm and get of several names or a --prefix. */
int ctl_cmd_stat(struct ctl *c);
int ctl_cmd_rm(struct ctl *c);
int ctl_cmd_get(struct ctl *c);

/* ctl_info.c, ctl_watch.c, ctl_metrics.c: info, info --watch (top), metrics. */
int ctl_cmd_info(struct ctl *c);
int ctl_cmd_info_watch(struct ctl *c);
int ctl_cmd_metrics(struct ctl *c);

/* ctl_run.c: run OP and graph FILE. */
int ctl_cmd_run(struct ctl *c);
int ctl_cmd_graph(struct ctl *c);

/* ctl_train.c: train (train.run) and step (train.step). */
int ctl_cmd_train(struct ctl *c);
int ctl_cmd_step(struct ctl *c);

/* ctl_jobs.c: detached jobs: jobs, logs [-f] JOB, cancel JOB; drain [on|off]
 * (job.drain, on until the runs stopped). */
int ctl_cmd_jobs(struct ctl *c);
int ctl_cmd_logs(struct ctl *c);
int ctl_cmd_cancel(struct ctl *c);
int ctl_cmd_drain(struct ctl *c);

/* ctl_save.c: tensors and models to and from safetensors files: save,
 * load, model save NAME FILE, model load FILE. */
int ctl_cmd_save(struct ctl *c);
int ctl_cmd_load(struct ctl *c);
int ctl_cmd_model_save(struct ctl *c, const char *model, const char *path);
int ctl_cmd_model_load(struct ctl *c, const char *path, const char *unused);

/* ctl_model.c: model define NAME FILE, model ls, model stat NAME, model rm
 * NAME; evaluate and predict. tensorctl.c checks a model subcommand's
 * arguments and options before calling it. */
int ctl_cmd_model_define(struct ctl *c, const char *name, const char *path);
int ctl_cmd_model_ls(struct ctl *c, const char *unused1, const char *unused2);
int ctl_cmd_model_stat(struct ctl *c, const char *name, const char *unused);
int ctl_cmd_model_rm(struct ctl *c, const char *name, const char *unused);
int ctl_cmd_evaluate(struct ctl *c);
int ctl_cmd_predict(struct ctl *c);

/* ctl_kernel.c: kernel create, run, ls, rm. */
int ctl_cmd_kernel(struct ctl *c);
