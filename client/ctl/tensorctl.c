/* tensorctl: command-line client of tensord (see docs/tensorctl.1).
 *
 * This file parses the command line and dispatches to the command files
 * (ctl_<command>.c, entry points in ctl_cmd.h), which share only
 * ctl_common.h. Global options may appear anywhere before "--". */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl_cmd.h"
#include "ctl_help.h"
#include "name.h"

#ifndef TENSORD_VERSION
#define TENSORD_VERSION "unknown"
#endif

#define DEFAULT_SOCKET "/run/tensord/tensord.sock"
/* rm/stat/get NAME...: as many as the command line holds. */
#define MAX_NAMES (1 << 20)

static const char usage_text[] =
	"Usage: tensorctl [--socket PATH] [--json] COMMAND [ARG...]\n"
	"\n"
	"Commands:\n"
	"  help [COMMAND | run OP]      the help of one command (also COMMAND --help),\n"
	"                               or an op's inputs and attrs\n"
	"  ping                         check that the daemon answers\n"
	"  info                         daemon, devices (ID: what --device takes),\n"
	"                               tensors and limits\n"
	"  info --watch [--interval S] [--count N]\n"
	"                               redraw memory and load of each device,\n"
	"                               clients and request rates\n"
	"                               every S seconds (1), N times (forever)\n"
	"  top [-n S] [-c N]            who uses the GPU, live (info --watch)\n"
	"  metrics                      counters in the Prometheus text format\n"
	"  ls [PREFIX]                  list tensors (whose names start with PREFIX)\n"
	"  stat NAME... | stat --prefix P\n"
	"                               metadata of tensors\n"
	"  rm NAME... | rm --prefix P   delete tensors (those whose names start with P)\n"
	"  sync                         make every change so far durable (store.sync)\n"
	"  chmod MODE NAME [--group GID]\n"
	"                               who else may use a tensor: MODE is private or\n"
	"                               group-read, group-write, world-read, world-write\n"
	"                               (comma-separated; - keeps it)\n"
	"  put NAME --file F.npy|F.safetensors [--dtype T] [--device ID]\n"
	"  put NAME --values 1,2,3 [--shape 3] [--dtype f32] [--device ID]\n"
	"                               store a tensor (on device ID)\n"
	"  copy SRC DST [--device ID]   copy a tensor (to device ID; DST = SRC moves\n"
	"                               it there); cp is the same\n"
	"  get NAME... [--out F.npy|F.safetensors|DIR/]... | get --prefix P [--out DIR/]\n"
	"                               print tensors, or save them as .npy/.safetensors\n"
	"                               (one --out per name, or a directory)\n"
	"  run OP IN... [-o OUT] [--attr KEY=VALUE]... [--device ID]\n"
	"                               run an op; print the result or store it as OUT\n"
	"  graph FILE.json              run the graph.run params in FILE (JSON)\n"
	"  train FILE.json [--devices ID,ID...]\n"
	"                               run the train.run params in FILE: a whole\n"
	"                               training run, with progress as it goes;\n"
	"                               data-parallel over the devices listed\n"
	"  step FILE.json               run the train.step params in FILE: one step\n"
	"  train --model NAME [FILE.json] --data IN=TENSOR... --batch-size N\n"
	"        [--epochs N | --steps N] [--devices ID,ID...] [--detach]\n"
	"                               train a defined model (train.run)\n"
	"  jobs                         list detached training jobs (train --detach)\n"
	"  logs [-f] JOB                how a job stands or ended; -f follows it\n"
	"  cancel JOB                   stop a running job\n"
	"  drain [on|off]               (root) pause training runs for maintenance\n"
	"  save PREFIX FILE.safetensors store the tensors named PREFIX... in a file\n"
	"  load FILE.safetensors [--prefix P]\n"
	"                               put every tensor of a file (names prefixed by P)\n"
	"  model define NAME FILE.json [--replace] [--precision f32|bf16|f16]\n"
	"                               define a model from its JSON definition\n"
	"  model ls | model stat NAME | model rm NAME [--tensors]\n"
	"  model save NAME FILE.safetensors\n"
	"                               parameters, optimizer state, definition, step\n"
	"  model load FILE.safetensors [--name NAME] [--replace]\n"
	"  evaluate NAME --data IN=TENSOR... [--metric ID]... [--batch-size N]\n"
	"                               loss and metrics of a model over a data set\n"
	"  predict NAME --input IN=TENSOR... [--output ID]... [-o [ID=]NAME]\n"
	"                               run a model forward; print or store outputs\n"
	"  kernel create NAME FILE.comp|FILE.spv\n"
	"                               compile a custom compute kernel (GLSL or SPIR-V)\n"
	"  kernel run NAME TENSOR... --groups X[,Y[,Z]] [--push MEMBER=NUMBER]...\n"
	"                               dispatch it on stored tensors, in place\n"
	"  kernel ls [PREFIX] | kernel rm NAME\n"
	"\n";

/* The rest of the usage (one string literal must stay under 4095 bytes). */
static const char usage_options[] =
	"Options:\n"
	"  --socket PATH   daemon socket (default: $TENSORD_SOCKET, else for a\n"
	"                  user $XDG_RUNTIME_DIR/tensord/tensord.sock when a daemon\n"
	"                  of the user's listens there, else " DEFAULT_SOCKET ")\n"
	"  --json          print one JSON document instead of text for people\n"
	"                  (train: one JSON line per event, then the result)\n"
	"  -h, --help      print this help (after a command: that command's help)\n"
	"  --version       print the version\n"
	"\n"
	"Exit status: 0 success, 1 the daemon refused the request (or another\n"
	"failure), 2 usage error, 3 the daemon could not be reached or the\n"
	"connection failed.\n"
	"\n"
	"dtypes: f32 f16 bf16 i32 u8. --shape \"\" or --shape scalar is rank 0.\n"
	"Every FILE read (put --file, graph, train, step, load, model define/load,\n"
	"kernel create) may be - for standard input.\n"
	"See tensorctl(1).\n";

enum opt_id { OPT_SOCKET, OPT_JSON, OPT_HELP, OPT_VERSION, OPT_FILE, OPT_VALUES, OPT_SHAPE,
	      OPT_DTYPE, OPT_OUT, OPT_ATTR, OPT_WATCH, OPT_INTERVAL, OPT_COUNT, OPT_GROUP, OPT_PREFIX,
	      OPT_NAME, OPT_MODEL, OPT_DATA, OPT_INPUT, OPT_METRIC, OPT_OUTPUT, OPT_BATCH, OPT_EPOCHS,
	      OPT_STEPS, OPT_REPLACE, OPT_TENSORS, OPT_PUSH, OPT_GROUPS, OPT_DEVICE, OPT_DEVICES,
	      OPT_DETACH, OPT_FOLLOW, OPT_PRECISION };
/* The bit of option `id` in a command's opts: 33 options, so 64 bits. */
#define OPT_BIT(id) ((uint64_t)1 << (id))
_Static_assert(OPT_FOLLOW < 32, "command_def.opts is a 32-bit mask");

static const struct option_def {
	const char *name;
	char short_name;
	bool value;
	enum opt_id id;
} options[] = {
	{ "socket", 0, true, OPT_SOCKET },   { "json", 0, false, OPT_JSON },
	{ "help", 'h', false, OPT_HELP },    { "version", 0, false, OPT_VERSION },
	{ "file", 'f', true, OPT_FILE },     { "values", 0, true, OPT_VALUES },
	{ "shape", 0, true, OPT_SHAPE },     { "dtype", 0, true, OPT_DTYPE },
	{ "out", 'o', true, OPT_OUT },       { "attr", 'a', true, OPT_ATTR },
	{ "watch", 'w', false, OPT_WATCH },  { "interval", 'n', true, OPT_INTERVAL },
	{ "count", 'c', true, OPT_COUNT },
	{ "group", 'g', true, OPT_GROUP },
	{ "prefix", 0, true, OPT_PREFIX },   { "name", 0, true, OPT_NAME },
	{ "model", 0, true, OPT_MODEL },     { "data", 0, true, OPT_DATA },
	{ "input", 0, true, OPT_INPUT },     { "metric", 0, true, OPT_METRIC },
	{ "output", 0, true, OPT_OUTPUT },   { "batch-size", 0, true, OPT_BATCH },
	{ "epochs", 0, true, OPT_EPOCHS },   { "steps", 0, true, OPT_STEPS },
	{ "replace", 0, false, OPT_REPLACE }, { "tensors", 0, false, OPT_TENSORS },
	{ "push", 0, true, OPT_PUSH },       { "groups", 0, true, OPT_GROUPS },
	{ "device", 0, true, OPT_DEVICE }, { "devices", 0, true, OPT_DEVICES },
	{ "detach", 0, false, OPT_DETACH }, { "follow", 0, false, OPT_FOLLOW },
	{ "precision", 0, true, OPT_PRECISION },
};

/* model SUBCOMMAND ...: the subcommand's arguments and options checked here,
 * then its file does the work (define, ls, stat, rm: ctl_model.c; save,
 * load: ctl_save.c, with save and load). */
static int run_model(struct ctl *c)
{
	static const struct {
		const char *name;
		int npos;          /* arguments after the subcommand */
		const char *usage;
		unsigned opts;     /* 1: --name, 2: --replace, 4: --tensors, 8: --precision */
		int (*run)(struct ctl *c, const char *a1, const char *a2);
	} subs[] = {
		{ "define", 2, "model define NAME FILE.json [--replace] [--precision f32|bf16|f16]", 10,
		  ctl_cmd_model_define },
		{ "ls", 0, "model ls", 0, ctl_cmd_model_ls },
		{ "stat", 1, "model stat NAME", 0, ctl_cmd_model_stat },
		{ "rm", 1, "model rm NAME [--tensors]", 4, ctl_cmd_model_rm },
		{ "save", 2, "model save NAME FILE.safetensors", 0, ctl_cmd_model_save },
		{ "load", 1, "model load FILE.safetensors [--name NAME] [--replace]", 3, ctl_cmd_model_load },
	};
	const char *sub = c->pos[0], *a1 = c->npos > 1 ? c->pos[1] : NULL, *a2 = c->npos > 2 ? c->pos[2] : NULL;
	unsigned given = (c->name ? 1u : 0) | (c->replace ? 2u : 0) | (c->tensors ? 4u : 0) |
			 (c->precision ? 8u : 0);
	size_t k;
	int status;

	for (k = 0; k < sizeof(subs) / sizeof(subs[0]); k++)
		if (!strcmp(subs[k].name, sub))
			break;
	if (k == sizeof(subs) / sizeof(subs[0]))
		return ctl_usage_error("model: unknown subcommand '%.32s' (define, ls, stat, rm, save, load)", sub);
	if (c->npos - 1 != subs[k].npos)
		return ctl_usage_error("usage: tensorctl %s", subs[k].usage);
	if (given & ~subs[k].opts)
		return ctl_usage_error("usage: tensorctl %s (%s takes no %s)", subs[k].usage, sub,
				       (given & ~subs[k].opts & 1) ? "--name" : (given & ~subs[k].opts & 2) ? "--replace"
				       : (given & ~subs[k].opts & 4) ? "--tensors" : "--precision");
	if (subs[k].npos && strcmp(sub, "load") && (status = ctl_check_ref("model name", a1)) != CTL_EXIT_OK)
		return status;
	if (c->name && (status = ctl_check_ref("model name", c->name)) != CTL_EXIT_OK)
		return status;
	return subs[k].run(c, a1, a2);
}

static const struct command_def {
	const char *name;
	int (*run)(struct ctl *c);
	int min_pos, max_pos;
	uint64_t opts;     /* OPT_BIT(enum opt_id) for each command option accepted */
	const char *first; /* what the first argument is, for messages */
	bool names;        /* every argument is a tensor name (checked before connecting) */
} commands[] = {
	{ "ping", ctl_cmd_ping, 0, 0, 0, "", false },
	{ "info", ctl_cmd_info, 0, 0, 1u << OPT_WATCH | 1u << OPT_INTERVAL | 1u << OPT_COUNT, "",
	  false },
	{ "top", ctl_cmd_info_watch, 0, 0, 1u << OPT_INTERVAL | 1u << OPT_COUNT, "", false },
	{ "metrics", ctl_cmd_metrics, 0, 0, 0, "", false },
	{ "ls", ctl_cmd_ls, 0, 1, 0, "PREFIX", true },
	{ "stat", ctl_cmd_stat, 0, MAX_NAMES, 1u << OPT_PREFIX, "NAME", true },
	{ "rm", ctl_cmd_rm, 0, MAX_NAMES, 1u << OPT_PREFIX, "NAME", true },
	{ "chmod", ctl_cmd_chmod, 2, 2, 1u << OPT_GROUP, "MODE", false },
	{ "sync", ctl_cmd_sync, 0, 0, 0, "", false },
	{ "put", ctl_cmd_put, 1, 1,
	  1u << OPT_FILE | 1u << OPT_VALUES | 1u << OPT_SHAPE | 1u << OPT_DTYPE | 1u << OPT_DEVICE,
	  "NAME", true },
	{ "copy", ctl_cmd_copy, 2, 2, 1u << OPT_DEVICE, "SRC DST", true },
	{ "cp", ctl_cmd_copy, 2, 2, 1u << OPT_DEVICE, "SRC DST", true },
	{ "get", ctl_cmd_get, 0, MAX_NAMES, 1u << OPT_OUT | 1u << OPT_PREFIX, "NAME", true },
	{ "run", ctl_cmd_run, 1, 1 + 64, 1u << OPT_OUT | 1u << OPT_ATTR | 1u << OPT_DEVICE, "OP", false },
	{ "graph", ctl_cmd_graph, 1, 1, 0, "FILE", false },
	{ "train", ctl_cmd_train, 0, 1,
	  1u << OPT_MODEL | 1u << OPT_DATA | 1u << OPT_BATCH | 1u << OPT_EPOCHS | 1u << OPT_STEPS |
	  1u << OPT_DEVICES | 1u << OPT_DETACH | OPT_BIT(OPT_PRECISION), "FILE", false },
	{ "jobs", ctl_cmd_jobs, 0, 0, 0, "", false },
	{ "logs", ctl_cmd_logs, 1, 1, 1u << OPT_FOLLOW, "JOB", false },
	{ "cancel", ctl_cmd_cancel, 1, 1, 0, "JOB", false },
	{ "drain", ctl_cmd_drain, 0, 1, 0, "on|off", false },
	{ "step", ctl_cmd_step, 1, 1, OPT_BIT(OPT_PRECISION), "FILE", false },
	{ "save", ctl_cmd_save, 2, 2, 0, "PREFIX", false },
	{ "load", ctl_cmd_load, 1, 1, 1u << OPT_PREFIX, "FILE", false },
	{ "model", run_model, 1, 3, 1u << OPT_NAME | 1u << OPT_REPLACE | 1u << OPT_TENSORS | OPT_BIT(OPT_PRECISION),
	  "SUBCOMMAND (define, ls, stat, rm, save, load)", false },
	{ "evaluate", ctl_cmd_evaluate, 1, 1, 1u << OPT_DATA | 1u << OPT_METRIC | 1u << OPT_BATCH, "NAME",
	  true },
	{ "predict", ctl_cmd_predict, 1, 1, 1u << OPT_INPUT | 1u << OPT_OUTPUT | 1u << OPT_OUT, "NAME", true },
	{ "kernel", ctl_cmd_kernel, 1, 2 + 8, 1u << OPT_PUSH | 1u << OPT_GROUPS,
	  "SUBCOMMAND (create, run, ls, rm)", false },
};

static const struct option_def *find_option(const char *arg, const char **ret_inline)
{
	*ret_inline = NULL;
	if (arg[1] != '-') {
		if (arg[2] != '\0')
			return NULL;
		for (size_t i = 0; i < sizeof(options) / sizeof(options[0]); i++)
			if (options[i].short_name && options[i].short_name == arg[1])
				return &options[i];
		return NULL;
	}
	for (size_t i = 0; i < sizeof(options) / sizeof(options[0]); i++) {
		size_t n = strlen(options[i].name);

		if (strncmp(arg + 2, options[i].name, n) != 0)
			continue;
		if (arg[2 + n] == '\0')
			return &options[i];
		if (arg[2 + n] == '=' && options[i].value) {
			*ret_inline = arg + 3 + n;
			return &options[i];
		}
	}
	return NULL;
}

static const char *option_label(const struct option_def *o, char *buf, size_t cap)
{
	snprintf(buf, cap, "--%s", o->name);
	return buf;
}

/* --help, help, help CMD, CMD --help, run OP --help, help run OP. */
static int print_help(const struct ctl *c, bool flag)
{
	const char *topic = NULL, *op = NULL;

	if (c->command && strcmp(c->command, "help") == 0) {
		if (c->npos > 2 || (c->npos == 2 && strcmp(c->pos[0], "run")))
			return ctl_usage_error("usage: tensorctl help [COMMAND | run OP]");
		topic = c->npos ? c->pos[0] : flag ? "help" : NULL;
		op = c->npos == 2 ? c->pos[1] : NULL;
	} else if (flag && c->command) {
		topic = c->command;
		op = strcmp(topic, "run") == 0 && c->npos ? c->pos[0] : NULL;
	}
	if (!topic) {
		fputs(usage_text, stdout);
		fputs(usage_options, stdout);
		return CTL_EXIT_OK;
	}
	if (op) {
		if (ctl_help_op(stdout, op) != 0) {
			fflush(stdout);
			return ctl_usage_error("run: no op '%.64s' in docs/ops.md (the daemon does not "
					       "list its ops; see docs/ops.md)", op);
		}
		return CTL_EXIT_OK;
	}
	if (ctl_help_command(stdout, topic) != 0)
		return ctl_usage_error("unknown command '%.64s' (see tensorctl --help)", topic);
	return CTL_EXIT_OK;
}

int main(int argc, char **argv)
{
	struct ctl c = { 0 };
	char default_socket[256];
	const struct command_def *cmd = NULL;
	bool dashdash = false, help = false, version = false;
	uint64_t given = 0;
	char label[32];
	int status;

	c.pos = calloc((size_t)argc + 1, sizeof(*c.pos));
	c.attrs = calloc((size_t)argc + 1, sizeof(*c.attrs));
	c.data = calloc((size_t)argc + 1, sizeof(*c.data));
	c.ids = calloc((size_t)argc + 1, sizeof(*c.ids));
	c.outs = calloc((size_t)argc + 1, sizeof(*c.outs));
	if (!c.pos || !c.attrs || !c.data || !c.ids || !c.outs) {
		free(c.outs);
		free(c.pos);
		free(c.attrs);
		free(c.data);
		free(c.ids);
		return ctl_error("out of memory");
	}
	for (int i = 1; i < argc; i++) {
		const char *arg = argv[i], *value;
		const struct option_def *o;

		if (!dashdash && strcmp(arg, "--") == 0) {
			dashdash = true;
			continue;
		}
		if (dashdash || arg[0] != '-' || arg[1] == '\0') {
			if (!c.command)
				c.command = arg;
			else
				c.pos[c.npos++] = arg;
			continue;
		}
		/* logs -f: -f is --file elsewhere, --follow here (as tail -f). */
		if (c.command && strcmp(c.command, "logs") == 0 && strcmp(arg, "-f") == 0)
			arg = "--follow";
		o = find_option(arg, &value);
		if (!o) {
			status = ctl_usage_error("unknown option '%s' (see tensorctl --help)", arg);
			goto out;
		}
		if (o->value && !value) {
			if (i + 1 >= argc) {
				status = ctl_usage_error("option %s needs a value",
							 option_label(o, label, sizeof(label)));
				goto out;
			}
			value = argv[++i];
		}
		given |= OPT_BIT(o->id);
		switch (o->id) {
		case OPT_SOCKET: c.socket = value; break;
		case OPT_JSON: c.json = true; break;
		case OPT_HELP: help = true; break;
		case OPT_VERSION: version = true; break;
		case OPT_FILE: c.file = value; break;
		case OPT_VALUES: c.values = value; break;
		case OPT_SHAPE: c.shape = value; break;
		case OPT_DTYPE: c.dtype = value; break;
		case OPT_OUT: c.out = c.outs[c.nouts++] = value; break;
		case OPT_ATTR: c.attrs[c.nattrs++] = value; break;
		case OPT_WATCH: c.watch = true; break;
		case OPT_INTERVAL: c.interval = value; break;
		case OPT_COUNT: c.count = value; break;
		case OPT_GROUP: c.group = value; break;
		case OPT_PREFIX: c.prefix = value; break;
		case OPT_NAME: c.name = value; break;
		case OPT_MODEL: c.model = value; break;
		case OPT_DATA:
		case OPT_INPUT: c.data[c.ndata++] = value; break;
		case OPT_METRIC:
		case OPT_OUTPUT: c.ids[c.nids++] = value; break;
		case OPT_BATCH: c.batch_size = value; break;
		case OPT_EPOCHS: c.epochs = value; break;
		case OPT_STEPS: c.steps = value; break;
		case OPT_REPLACE: c.replace = true; break;
		case OPT_TENSORS: c.tensors = true; break;
		case OPT_PUSH: c.attrs[c.nattrs++] = value; break;
		case OPT_GROUPS: c.groups = value; break;
		case OPT_DEVICE: c.device = value; break;
		case OPT_DEVICES: c.devices = value; break;
		case OPT_DETACH: c.detach = true; break;
		case OPT_FOLLOW: c.follow = true; break;
		case OPT_PRECISION: c.precision = value; break;
		}
	}
	if (help || (c.command && strcmp(c.command, "help") == 0)) {
		status = print_help(&c, help);
		goto out;
	}
	if (version) {
		printf("tensorctl %s\n", TENSORD_VERSION);
		status = CTL_EXIT_OK;
		goto out;
	}
	if (!c.command) {
		fputs(usage_text, stderr);
		fputs(usage_options, stderr);
		status = CTL_EXIT_USAGE;
		goto out;
	}
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		if (strcmp(commands[i].name, c.command) == 0)
			cmd = &commands[i];
	if (!cmd) {
		status = ctl_usage_error("unknown command '%s' (see tensorctl --help)", c.command);
		goto out;
	}
	for (size_t i = 0; i < sizeof(options) / sizeof(options[0]); i++) {
		uint64_t bit = OPT_BIT(options[i].id);

		if (options[i].id >= OPT_FILE && (given & bit) && !(cmd->opts & bit)) {
			status = ctl_usage_error("%s takes no option %s", cmd->name,
						 option_label(&options[i], label, sizeof(label)));
			goto out;
		}
	}
	if (!strcmp(cmd->name, "top"))
		c.watch = true; /* top is info --watch */
	if ((c.interval || c.count) && !c.watch) {
		status = ctl_usage_error("--interval and --count go with info --watch or top");
		goto out;
	}
	if (c.npos < cmd->min_pos || c.npos > cmd->max_pos) {
		status = c.npos < cmd->min_pos
				 ? ctl_usage_error("%s: missing %s", cmd->name, cmd->first)
				 : ctl_usage_error("%s: unexpected argument '%s'", cmd->name,
						   c.pos[cmd->max_pos]);
		goto out;
	}
	/* Names are checked here too, so that a typo is a usage error found
	 * before any file is read or any connection made. */
	for (int i = cmd->names ? 0 : 1; i < c.npos; i++) {
		size_t n = strnlen(c.pos[i], TENSORD_MAX_NAME_LEN + 1);
		bool prefix = strcmp(cmd->name, "ls") == 0;

		if (!tdp_ref_valid(c.pos[i], n, prefix)) {
			status = ctl_usage_error("invalid %s '%.*s' (1-%d bytes of A-Z a-z 0-9 "
						 ". _ : / -)", prefix ? "prefix" : "tensor name",
						 n > 64 ? 64 : (int)n, c.pos[i], TENSORD_MAX_NAME_LEN);
			goto out;
		}
	}
	if (c.out && !strcmp(cmd->name, "run") &&
	    !tdp_ref_valid(c.out, strnlen(c.out, TENSORD_MAX_NAME_LEN + 1), false)) {
		status = ctl_usage_error("invalid tensor name '%.64s' for -o", c.out);
		goto out;
	}
	c.socket_from = CTL_SOCKET_OPTION;
	if (!c.socket) {
		c.socket = getenv("TENSORD_SOCKET");
		c.socket_from = CTL_SOCKET_ENV;
		if (!c.socket || !*c.socket) {
			c.socket = tensord_default_socket(default_socket, sizeof(default_socket));
			c.socket_from = CTL_SOCKET_DEFAULT;
		}
	}
	status = c.watch ? ctl_cmd_info_watch(&c) : cmd->run(&c);
	if (fflush(stdout) != 0 || ferror(stdout)) {
		if (status == CTL_EXIT_OK)
			status = ctl_error("writing to standard output failed");
	}
out:
	tensord_free(c.td);
	free(c.pos);
	free(c.attrs);
	free(c.data);
	free(c.ids);
	free(c.outs);
	return status;
}
