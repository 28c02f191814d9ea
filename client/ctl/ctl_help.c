/* Per-command help: `tensorctl help CMD`, `tensorctl CMD --help`, and
 * `tensorctl run OP --help` (the op's row of docs/ops.md, compiled in).
 * Each entry: usage lines, what it does, its options, an example. The
 * global summary is tensorctl.c's usage_text; tensorctl(1) has the rest. */
#include <errno.h>
#include <string.h>

#include "ctl_help.h"

static const struct {
	const char *name;
	const char *text;
} helps[] = {
	{ "ping", "Usage: tensorctl ping\n\n"
		  "Check that the daemon answers; prints its version and the round trip.\n\n"
		  "Example:\n  tensorctl ping\n" },
	{ "info", "Usage: tensorctl info\n"
		  "       tensorctl info --watch [--interval S] [--count N]\n\n"
		  "Describe the daemon: version, uptime, clients, tensors, devices, limits,\n"
		  "your quotas, and a summary of the request counters (--json: everything).\n"
		  "--watch redraws memory and load of each device, clients and request rates.\n\n"
		  "Options:\n"
		  "  -w, --watch          redraw every S seconds, fitted to the terminal width\n"
		  "  -n, --interval S     seconds between samples (default 1)\n"
		  "  -c, --count N        stop after N samples (default: until interrupted)\n\n"
		  "Example:\n  tensorctl info --watch --interval 0.5\n" },
	{ "top", "Usage: tensorctl top [--interval S] [--count N]\n\n"
		 "A live view of who uses the GPU, like nvidia-smi or htop: each user's share\n"
		 "of the device over the last interval (GPU%: its device time over the wall\n"
		 "time), its tensors, jobs and connections (root sees every user, others\n"
		 "themselves), the devices' memory and load, the running jobs. Fitted to the\n"
		 "terminal; one line per sample when not a terminal, one JSON object with --json\n"
		 "(info's map, with users_gpu_percent under rates). The same as info --watch.\n\n"
		 "Options:\n"
		 "  -n, --interval S     seconds between samples (default 1)\n"
		 "  -c, --count N        stop after N samples (default: until interrupted)\n\n"
		 "Example:\n  tensorctl top --interval 2\n" },
	{ "metrics", "Usage: tensorctl metrics\n\n"
		     "Print the daemon's counters in the Prometheus text format.\n\n"
		     "Example:\n  tensorctl metrics | grep tensord_requests_total\n" },
	{ "ls", "Usage: tensorctl ls [PREFIX]\n\n"
		"List the tensors (those whose names start with PREFIX), sorted by name.\n\n"
		"Example:\n  tensorctl ls digits/\n" },
	{ "stat", "Usage: tensorctl stat NAME... | stat --prefix P\n\n"
		  "Metadata of tensors: dtype, shape, size, device, owner, mode.\n\n"
		  "Options:\n"
		  "  --prefix P           every tensor whose name starts with P\n\n"
		  "Example:\n  tensorctl stat w b\n" },
	{ "rm", "Usage: tensorctl rm NAME... | rm --prefix P\n\n"
		"Delete tensors and free their memory. Every name is tried; the exit status\n"
		"is 1 if any of them failed.\n\n"
		"Options:\n"
		"  --prefix P           every tensor whose name starts with P (one listing, then\n"
		"                       one delete each)\n\n"
		"Example:\n  tensorctl rm --prefix digits/\n" },
	{ "sync", "Usage: tensorctl sync\n\n"
		  "Make every change acknowledged so far durable (store.sync).\n\n"
		  "Example:\n  tensorctl sync\n" },
	{ "chmod", "Usage: tensorctl chmod MODE NAME [--group GID]\n\n"
		   "Set who else may use a tensor. MODE is private, or a comma list of\n"
		   "group-read, group-write, world-read, world-write; - keeps the mode.\n\n"
		   "Options:\n"
		   "  -g, --group GID      the group the group-* bits apply to\n\n"
		   "Example:\n  tensorctl chmod group-read w --group 100\n" },
	{ "put", "Usage: tensorctl put NAME --file F.npy|F.safetensors|- [--dtype T] [--device ID]\n"
		 "       tensorctl put NAME --values 1,2,3 [--shape 3] [--dtype T] [--device ID]\n\n"
		 "Store a tensor, replacing any tensor of that name. --file - reads a .npy\n"
		 "from standard input.\n\n"
		 "Options:\n"
		 "  -f, --file F         a .npy or .safetensors file (one tensor), or - (stdin, .npy)\n"
		 "  --values V,V,...     the numbers, row-major\n"
		 "  --shape D,D,...      the shape of --values (default: a vector); \"\" is rank 0\n"
		 "  --dtype T            f32 f16 bf16 i32 u8 (default f32, or the file's)\n"
		 "  --device ID          the device to store it on (see tensorctl info)\n\n"
		 "Example:\n  tensorctl put x --values 1,2,3,4 --shape 2,2\n" },
	{ "copy", "Usage: tensorctl copy SRC DST [--device ID]   (cp is the same)\n\n"
		  "Copy a tensor; DST = SRC with --device moves it to that device.\n\n"
		  "Options:\n"
		  "  --device ID          the device the copy goes to\n\n"
		  "Example:\n  tensorctl copy w w.bak\n" },
	{ "get", "Usage: tensorctl get NAME... [--out F.npy|F.safetensors|DIR/|-]...\n"
		 "       tensorctl get --prefix P [--out DIR/]\n\n"
		 "Print tensors, or save them. Several names take one --out per name, in order,\n"
		 "or one --out that is a directory (an existing one, or a path ending in /):\n"
		 "each tensor goes to DIR/NAME.npy ('/' in NAME becomes '_'). An --out whose\n"
		 "extension is neither .npy nor .safetensors is an error (exit 2).\n\n"
		 "Options:\n"
		 "  -o, --out F          .npy, .safetensors, a directory, or - (.npy on stdout)\n"
		 "  --prefix P           every tensor whose name starts with P\n\n"
		 "Example:\n  tensorctl get w b --out saved/\n" },
	{ "run", "Usage: tensorctl run OP IN... [-o OUT] [--attr KEY=VALUE]... [--device ID]\n\n"
		 "Run one op on stored tensors; print the result, or store it as OUT.\n"
		 "`tensorctl run OP --help` shows the op's inputs and attrs (from docs/ops.md,\n"
		 "compiled in: the daemon has no method that lists its ops).\n\n"
		 "Options:\n"
		 "  -o, --out OUT        store the result under this name instead of printing it\n"
		 "  -a, --attr K=V       an attr (tensorctl(1), run, has the value syntax)\n"
		 "  --device ID          the device the op runs on\n\n"
		 "Example:\n  tensorctl run matmul a b -o c\n" },
	{ "graph", "Usage: tensorctl graph FILE.json|-\n\n"
		   "Run the graph.run params in FILE (JSON; - reads standard input): many ops\n"
		   "in one request and one GPU submission.\n\n"
		   "Example:\n  echo '{\"nodes\": [...], \"outputs\": [...]}' | tensorctl graph -\n" },
	{ "train", "Usage: tensorctl train FILE.json|- [--devices ID,ID...] [--detach] [--precision P]\n"
		   "       tensorctl train --model NAME [FILE.json|-] --data IN=TENSOR... --batch-size N\n"
		   "             [--epochs N | --steps N] [--devices ID,ID...] [--detach] [--precision P]\n\n"
		   "Run a whole training loop in the daemon (train.run), with progress as it goes.\n"
		   "With --model, --data and --batch-size are required unless FILE gives\n"
		   "\"data\" and \"batch_size\".\n\n"
		   "Options:\n"
		   "  --model NAME         train a model made with tensorctl model define\n"
		   "  --data IN=TENSOR     a data set: model input IN fed from a stored tensor\n"
		   "  --batch-size N       rows per step\n"
		   "  --epochs N           passes over the data (default 1)\n"
		   "  --steps N            or this many steps (not both)\n"
		   "  --devices ID,ID...   data-parallel over these devices\n"
		   "  --detach             run it as a job that outlives this command: print\n"
		   "                       the job id at once (see jobs, logs, cancel)\n"
		   "  --precision P        f32 (default: the model's), bf16 or f16: mixed\n"
		   "                       precision, products on bf16 (f16) operands, f32\n"
		   "                       master weights; f16 scales the loss dynamically\n\n"
		   "Example:\n  tensorctl train --model mlp --data x=train_x --data y=train_y \\\n"
		   "      --batch-size 64 --epochs 5\n" },
	{ "jobs", "Usage: tensorctl jobs\n\n"
		  "List your detached training jobs (root: everyone's), newest first: id, owner,\n"
		  "state (running, done, failed, cancelled, interrupted), devices, steps done,\n"
		  "the last loss, time, model.\n\n"
		  "Example:\n  tensorctl train run.json --detach && tensorctl jobs\n" },
	{ "logs", "Usage: tensorctl logs [-f] JOB\n\n"
		  "Show a job: where it stands, or how it ended (the run's result, or its\n"
		  "error). Exit status 0 only for a job that ran to its end.\n\n"
		  "Options:\n"
		  "  -f, --follow         watch it (job.watch): progress as train shows it,\n"
		  "                       until it ends; Ctrl-C stops watching, not the job\n\n"
		  "JOB is the id jobs shows, or UID:ID for another user's job (root).\n\n"
		  "Example:\n  tensorctl logs -f 3\n" },
	{ "cancel", "Usage: tensorctl cancel JOB\n\n"
		    "Stop a running job after its step in progress (what it trained stays).\n"
		    "JOB is the id jobs shows, or UID:ID for another user's job (root).\n\n"
		    "Example:\n  tensorctl cancel 3\n  tensorctl cancel 1001:2\n" },	{ "drain", "Usage: tensorctl drain [on|off]\n\n"
		   "Drain the daemon for maintenance (root; job.drain, as SIGUSR1 does): new\n"
		   "train.run requests are refused, and the running runs stop after their steps\n"
		   "in flight; detached jobs then wait, interrupted, to resume from that step\n"
		   "after a restart or 'drain off'. Waits until no run runs, then says how many\n"
		   "jobs wait. 'off' accepts runs again and resumes the drained jobs here.\n\n"
		   "Example:\n  tensorctl drain && systemctl restart tensord\n" },

	{ "step", "Usage: tensorctl step FILE.json|- [--precision P]\n\n"
		  "Run one training step (the train.step params in FILE).\n\n"
		  "Options:\n"
		  "  --precision P        f32, bf16 or f16 (mixed precision), over FILE's\n\n"
		  "Example:\n  tensorctl step step.json\n" },
	{ "save", "Usage: tensorctl save PREFIX FILE.safetensors\n\n"
		  "Write every tensor whose name starts with PREFIX into a safetensors file.\n\n"
		  "Example:\n  tensorctl save digits/ digits.safetensors\n" },
	{ "load", "Usage: tensorctl load FILE.safetensors|- [--prefix P]\n\n"
		  "Put every tensor of a safetensors file (- reads standard input), each named\n"
		  "P followed by its name in the file.\n\n"
		  "Options:\n"
		  "  --prefix P           put before every name\n\n"
		  "Example:\n  tensorctl load weights.safetensors --prefix restored/\n" },
	{ "model", "Usage: tensorctl model define NAME FILE.json|- [--replace] [--precision P]\n"
		   "       tensorctl model ls | model stat NAME | model rm NAME [--tensors]\n"
		   "       tensorctl model save NAME FILE.safetensors\n"
		   "       tensorctl model load FILE.safetensors|- [--name NAME] [--replace]\n\n"
		   "Define, list, describe, delete, save and load models.\n\n"
		   "Options:\n"
		   "  --replace            define/load over an existing model of that name\n"
		   "  --tensors            rm: delete its parameter tensors too\n"
		   "  --name NAME          load: the model's name (default: the file's)\n"
		   "  --precision P        define: f32 (default), bf16 or f16, mixed precision for\n"
		   "                       the model's steps, evaluation and prediction\n\n"
		   "Example:\n  tensorctl model define mlp mlp.json && tensorctl model stat mlp\n" },
	{ "evaluate", "Usage: tensorctl evaluate NAME --data IN=TENSOR... [--metric ID]... [--batch-size N]\n\n"
		      "The model's loss and metrics over a data set. --data is required.\n\n"
		      "Options:\n"
		      "  --data IN=TENSOR     a data set for model input IN\n"
		      "  --metric ID          a metric (default: the model's)\n"
		      "  --batch-size N       rows per forward pass\n\n"
		      "Example:\n  tensorctl evaluate mlp --data x=test_x --data y=test_y --metric accuracy\n" },
	{ "predict", "Usage: tensorctl predict NAME --input IN=TENSOR... [--output ID]... [-o [ID=]NAME]\n\n"
		     "Run a model forward; print the outputs or store them. --input is required.\n\n"
		     "Options:\n"
		     "  --input IN=TENSOR    model input IN from a stored tensor\n"
		     "  --output ID          an output to compute (default: the model's)\n"
		     "  -o, --out [ID=]NAME  store the output as NAME\n\n"
		     "Example:\n  tensorctl predict mlp --input x=test_x -o pred\n" },
	{ "kernel", "Usage: tensorctl kernel create NAME FILE.comp|FILE.spv|-\n"
		    "       tensorctl kernel run NAME TENSOR... --groups X[,Y[,Z]] [--push MEMBER=NUMBER]...\n"
		    "       tensorctl kernel ls [PREFIX] | kernel rm NAME\n\n"
		    "Compile a custom compute kernel (GLSL, or SPIR-V; - reads standard input,\n"
		    "GLSL unless it starts with the SPIR-V magic) and dispatch it on stored tensors.\n"
		    "kernel run needs --groups.\n\n"
		    "Options:\n"
		    "  --groups X[,Y[,Z]]   workgroup counts\n"
		    "  --push MEMBER=NUMBER a push-constant member\n\n"
		    "Example:\n  tensorctl kernel run scale x --groups 4 --push factor=2\n" },
	{ "help", "Usage: tensorctl help [COMMAND | run OP]\n\n"
		  "Print the summary of every command, or the help of one command (the same as\n"
		  "tensorctl COMMAND --help), or what an op takes (tensorctl run OP --help).\n\n"
		  "Example:\n  tensorctl help put\n" },
};

int ctl_help_command(FILE *f, const char *name)
{
	if (!strcmp(name, "cp"))
		name = "copy";
	for (size_t i = 0; i < sizeof(helps) / sizeof(helps[0]); i++) {
		if (!strcmp(helps[i].name, name)) {
			fputs(helps[i].text, f);
			fputs("\nSee tensorctl(1) and tensorctl --help (global options).\n", f);
			return 0;
		}
	}
	return -ENOENT;
}

int ctl_help_op(FILE *f, const char *op)
{
	const struct ctl_op_help *h = NULL;

	for (size_t i = 0; i < ctl_op_help_count; i++)
		if (!strcmp(ctl_op_helps[i].op, op))
			h = &ctl_op_helps[i];
	if (!h) {
		ctl_help_command(f, "run");
		return -ENOENT;
	}
	fprintf(f, "Usage: tensorctl run %s IN... [-o OUT] [--attr KEY=VALUE]... [--device ID]\n\n", op);
	fprintf(f, "op %s (%s, from docs/ops.md; the daemon does not list its ops):\n", op, h->section);
	fputs(h->text, f);
	fputs("\nAttrs are given as --attr KEY=VALUE. See docs/ops.md for the details\n"
	      "and tensorctl help run for run's options.\n", f);
	return 0;
}
