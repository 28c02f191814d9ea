#!/usr/bin/python3
"""The documentation against the programs' own tables, so they cannot drift.

The daemon says what it parses: `tensord --print-config` lists every
configuration key with its value (the defaults, when given nothing) and
`tensord --list-options` every long option of its getopt table. tensorctl's
commands come from `tensorctl --help`, each one checked against the binary
(an unknown command or subcommand is refused, and the refusal lists the
subcommands). Checked against them:

  (a) systemd/tensord.conf lists every key exactly once, commented out, with
      the daemon's default (the listed values, uncommented, give exactly the
      defaults), and nothing else;
  (b) `tensord --help` shows every option (with a metavar where it takes an
      argument) and every --device form the daemon accepts;
  (c) tensord(8) documents every option (SYNOPSIS and OPTIONS) and every key
      (CONFIGURATION FILE), and no option or key that does not exist;
  (d) tensorctl(1)'s SYNOPSIS and COMMANDS name exactly the commands of
      `tensorctl --help`, and each form in its SYNOPSIS has the options of that
      command's usage lines in `tensorctl help CMD`, optional or required alike.

A key or option added to the daemon without its documentation fails here.
Environment: TENSORD_BIN, TENSORCTL_BIN, SOURCE_ROOT.
"""
import os
import re
import subprocess
import sys
import tempfile
import traceback

ROOT = os.environ.get("SOURCE_ROOT") or os.path.join(os.path.dirname(__file__), "..", "..")
TENSORD = os.environ.get("TENSORD_BIN", "")
TENSORCTL = os.environ.get("TENSORCTL_BIN", "")
# What the daemon prints must not depend on the caller's environment.
ENV = {k: v for k, v in os.environ.items() if k not in ("TENSORD_SOCKET", "STATE_DIRECTORY")}
KEY_LINE = re.compile(r"^#([a-z][a-z0-9_]*)\s*=\s*(.*)$")
OPTION = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*|-[a-zA-Z])(?![\w-])")


def run(argv, ok=True):
    p = subprocess.run(argv, env=ENV, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                       timeout=60)
    if ok and p.returncode != 0:
        raise AssertionError("%s exited %d: %s" % (argv, p.returncode, p.stderr))
    return p


def print_config(*args):
    """tensord --print-config: [(key, value)] in the daemon's order."""
    out = run([TENSORD] + list(args) + ["--print-config"]).stdout
    pairs = []
    for line in out.splitlines():
        k, sep, v = line.partition(" = ")
        assert sep and re.fullmatch(r"[a-z][a-z0-9_]*", k), "bad --print-config line %r" % line
        pairs.append((k, v))
    keys = [k for k, _ in pairs]
    assert len(keys) == len(set(keys)) and len(keys) >= 10, keys
    return pairs


def daemon_options():
    """tensord --list-options: {"--name": (takes an argument, "-c" or None)}."""
    opts = {}
    for line in run([TENSORD, "--list-options"]).stdout.splitlines():
        words = line.split()
        assert words and words[0].startswith("--"), "bad --list-options line %r" % line
        opts[words[0]] = ("ARG" in words[1:], next((w for w in words[1:] if re.fullmatch(r"-\w", w)), None))
    assert "--config" in opts and "--help" in opts and "--list-options" in opts, opts
    return opts


# ---- roff -------------------------------------------------------------------

def roff_args(s):
    return [a[1:-1] if a.startswith('"') else a for a in re.findall(r'"[^"]*"?|(?:\\.|\S)+', s)]


def roff_text(line):
    """A man page source line as the text it shows (fonts and macros gone)."""
    m = re.match(r"^\.([A-Z]{1,2})\s*(.*)$", line)
    if m:
        macro, rest = m.groups()
        if macro in ("B", "I", "SH", "SS", "TP", "IP"):
            line = " ".join(roff_args(rest))
        elif re.fullmatch(r"[BIR]{2}", macro):
            line = "".join(roff_args(rest))
        else:
            line = rest
    for a, b in (("\\-", "-"), ("\\(lq", '"'), ("\\(rq", '"'), ("\\(dq", '"'), ("\\ ", " "),
                 ("\\&", ""), ("\\e", "\\")):
        line = line.replace(a, b)
    return re.sub(r"\\f(\[[^]]*\]|.)", "", line)


def man_sections(path):
    """{section title: [source lines]}."""
    secs, cur = {}, None
    with open(path, encoding="utf-8") as f:
        for line in f.read().splitlines():
            if line.startswith(".SH"):
                cur = roff_text(line).strip()
                secs[cur] = []
            elif cur is not None and not line.startswith('.\\"'):
                secs[cur].append(line)
    return secs


def tags(lines):
    """The tag lines of .TP items (and .TQ extra tags), as text."""
    out = []
    for i, line in enumerate(lines[:-1]):
        if line.startswith(".TP") or line.startswith(".TQ"):
            out.append(roff_text(lines[i + 1]).strip())
    return out


def paragraph(lines, tag_pred):
    """The text of the .TP item whose tag satisfies tag_pred."""
    text, inside = [], False
    for i, line in enumerate(lines):
        if line.startswith(".TP"):
            if inside:
                break
            inside = i + 1 < len(lines) and tag_pred(roff_text(lines[i + 1]).strip())
        elif inside:
            text.append(roff_text(line))
    return " ".join(text)


# ---- (a) the shipped configuration file -------------------------------------------

def test_shipped_config_lists_every_key_with_its_default():
    defaults = print_config()
    keys = [k for k, _ in defaults]
    path = os.path.join(ROOT, "systemd", "tensord.conf")
    listed, errors = [], []
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    for n, raw in enumerate(lines, 1):
        line = raw.strip()
        if not line:
            continue
        if not line.startswith("#"):
            errors.append("%d: %r is set, not commented out (the file lists defaults)" % (n, raw))
            continue
        m = KEY_LINE.match(line)
        if m:
            listed.append((n, m.group(1), m.group(2)))
        elif re.match(r"^#\s*[a-z_]+\s*=", line) and line.split("=")[0].strip("# ") in keys:
            errors.append("%d: %r: write a key as '#key = value'" % (n, raw))
    names = [k for _, k, _ in listed]
    for k in keys:
        if names.count(k) != 1:
            errors.append("key %s is listed %d times (once expected)" % (k, names.count(k)))
    for n, k, _ in listed:
        if k not in keys:
            errors.append("%d: unknown key %s (the daemon has no such setting)" % (n, k))
    assert not errors, "%s:\n  %s" % (path, "\n  ".join(errors))
    # Uncommented, the listed values must be exactly the defaults.
    with tempfile.NamedTemporaryFile("w", suffix=".conf") as f:
        f.write("".join("%s = %s\n" % (k, v) for _, k, v in listed))
        f.flush()
        got = dict(print_config("--config", f.name))
    want = dict(defaults)
    diff = ["%s: the file says %s, the daemon's default is %s" % (k, got[k], want[k])
            for k in keys if got[k] != want[k]]
    assert not diff, "%s:\n  %s" % (path, "\n  ".join(diff))
    # As shipped (all commented out) it loads and changes nothing.
    assert print_config("--config", path) == defaults


def test_every_parsed_key_is_in_the_table():
    """A key parsed outside the table (an `else if (!strcmp(key, "x"))` of the
    old config_set, say after a merge) would be missing from --print-config
    and so from every check here."""
    with open(os.path.join(ROOT, "daemon", "base", "config.c"), encoding="utf-8") as f:
        src = f.read()
    parsed = set(re.findall(r'strcmp\(\s*key\s*,\s*"([^"]+)"\s*\)', src))
    missing = sorted(parsed - {k for k, _ in print_config()})
    assert not missing, "daemon/base/config.c parses %s outside its keys[] table" % ", ".join(missing)


def test_print_config_round_trips():
    """What --print-config prints reads back as the same settings, so (a)
    compares values, not spellings."""
    args = ["--device", "0,0", "--state-dir", "/tmp/x", "-v"]
    first = print_config(*args)
    with tempfile.NamedTemporaryFile("w", suffix=".conf") as f:
        f.write("".join("%s = %s\n" % kv for kv in first))
        f.flush()
        assert print_config("--config", f.name) == first
    d = dict(first)
    assert d["device"] == "0,0" and d["state_dir"] == "/tmp/x" and d["verbose"] == "yes", d


# ---- (b) tensord --help -------------------------------------------------------------

def accepted_devices():
    """The --device forms the daemon accepts, from a list of candidates."""
    cands = ["auto", "all", "cpu", "gpu", "any", "none", "discrete", "integrated", "0", "0,1"]
    return [c for c in cands if run([TENSORD, "--device", c, "--print-config"], ok=False).returncode == 0]


def check_device_forms(text, where):
    acc = accepted_devices()
    assert "auto" in acc and "0,1" in acc, acc
    missing = [c for c in acc if not c[0].isdigit() and not re.search(r"\b%s\b" % c, text)]
    if not re.search(r"I,J|INDEX\[?,", text):
        missing.append("a list of indexes (I,J,...)")
    assert not missing, "%s does not mention --device %s: %r" % (where, ", ".join(missing), text)


def test_help_lists_every_option():
    opts = daemon_options()
    help_text = run([TENSORD, "--help"]).stdout
    option_lines = [l for l in help_text.splitlines() if re.match(r"^\s+-", l)]
    shown = set()
    for l in option_lines:
        head = re.split(r"\s{2,}", l.strip())[0]
        shown |= set(OPTION.findall(head))
    errors = []
    for name, (has_arg, short) in opts.items():
        if name not in shown:
            errors.append("%s is not listed" % name)
        if short and short not in shown:
            errors.append("%s (%s) is not listed" % (short, name))
        if has_arg and not re.search(r"(?<![\w-])%s [A-Z]" % re.escape(name), help_text):
            errors.append("%s is listed without its argument" % name)
    known = set(opts) | {s for _, s in opts.values() if s}
    errors += ["%s is listed but the daemon has no such option" % o for o in shown - known]
    assert not errors, "tensord --help:\n  %s\n%s" % ("\n  ".join(errors), help_text)
    dev = help_text[help_text.index("--device"):]
    dev = dev[:re.search(r"\n  -", dev).start()]
    check_device_forms(dev, "tensord --help")


# ---- (c) tensord(8) -------------------------------------------------------------------

def test_man_tensord_documents_every_option_and_key():
    path = os.path.join(ROOT, "docs", "tensord.8")
    secs = man_sections(path)
    opts = daemon_options()
    keys = [k for k, _ in print_config()]
    errors = []
    tagged = {o for t in tags(secs["OPTIONS"]) for o in OPTION.findall(t)}
    synopsis = " ".join(roff_text(l) for l in secs["SYNOPSIS"])
    for name, (_, short) in opts.items():
        if name not in tagged:
            errors.append("OPTIONS does not document %s" % name)
        if short and short not in tagged:
            errors.append("OPTIONS does not document %s" % short)
        if not re.search(r"(?<![\w-])%s(?![\w-])" % re.escape(name), synopsis):
            errors.append("SYNOPSIS does not show %s" % name)
    known = set(opts) | {s for _, s in opts.values() if s}
    errors += ["OPTIONS documents %s, which the daemon does not have" % o for o in tagged - known]
    conf_tags = [t for t in tags(secs["CONFIGURATION FILE"]) if re.fullmatch(r"[a-z][a-z0-9_]*", t)]
    for k in keys:
        if conf_tags.count(k) != 1:
            errors.append("CONFIGURATION FILE documents key %s %d times (once expected)"
                          % (k, conf_tags.count(k)))
    errors += ["CONFIGURATION FILE documents %s, which the daemon does not have" % t
               for t in conf_tags if t not in keys]
    assert not errors, "%s:\n  %s" % (path, "\n  ".join(errors))
    dev = paragraph(secs["OPTIONS"], lambda t: t.startswith("--device"))
    dev_tag = [t for t in tags(secs["OPTIONS"]) if t.startswith("--device")][0]
    check_device_forms(dev_tag + " " + dev, "tensord(8) --device")


# ---- (d) tensorctl(1) ------------------------------------------------------------------

def command_names(entry):
    """'model ls | model stat NAME' -> ['model ls', 'model stat']; 'put NAME ...' -> ['put']."""
    names = []
    for alt in entry.split("|"):
        words = []
        for w in alt.split():
            if not re.fullmatch(r"[a-z][a-z-]*", w):
                break
            words.append(w)
        if words:
            names.append(" ".join(words))
    return names


def help_commands():
    text = run([TENSORCTL, "--help"]).stdout
    body = text[text.index("Commands:"):text.index("Options:")]
    cmds = set()
    for line in body.splitlines():
        if re.match(r"^  [a-z]", line):
            cmds |= set(command_names(re.split(r"\s{3,}", line.strip())[0]))
    return cmds


def refusal(argv):
    p = run([TENSORCTL, "--socket", "/nonexistent/tensord.sock"] + argv, ok=False)
    return p.stderr


def test_tensorctl_help_matches_the_binary():
    cmds = help_commands()
    assert {"ping", "put", "get", "train", "model define"} <= cmds, cmds
    errors = []
    tops = {c.split()[0] for c in cmds}
    for top in sorted(tops):
        if "unknown command" in refusal([top]):
            errors.append("--help lists %s, which tensorctl refuses" % top)
        m = re.search(r"unknown subcommand '[^']*' \(([^)]*)\)", refusal([top, "no-such-sub"]))
        listed = {c.split()[1] for c in cmds if c.startswith(top + " ")}
        if m:
            subs = {s.strip() for s in m.group(1).split(",")}
            if subs != listed:
                errors.append("tensorctl %s has subcommands %s, --help lists %s"
                              % (top, sorted(subs), sorted(listed)))
        elif listed:
            errors.append("--help lists subcommands of %s, which has none" % top)
    assert not errors, "\n  ".join(errors)


def test_man_tensorctl_lists_every_command():
    path = os.path.join(ROOT, "docs", "tensorctl.1")
    secs = man_sections(path)
    cmds = help_commands()
    documented = set()
    for t in tags(secs["COMMANDS"]):
        documented |= set(command_names(t))
    # SYNOPSIS: one entry per .br, "tensorctl [OPTIONS] COMMAND ..."
    synopsis, entry = set(), []
    for line in secs["SYNOPSIS"] + [".br"]:
        if line.startswith(".br") or line.startswith(".PP"):
            text = " ".join(roff_text(l) for l in entry)
            m = re.match(r"^tensorctl (?:\[OPTIONS\] |\[--socket PATH\] )?(.*)$", text.strip())
            if m:
                synopsis |= set(command_names(m.group(1)))
            entry = []
        else:
            entry.append(line)
    aliases = {a for a in synopsis | documented - cmds
               if re.search(r"\b%s is the same\b" % a, run([TENSORCTL, "--help"]).stdout)}
    errors = ["COMMANDS does not document %s" % c for c in sorted(cmds - documented)]
    errors += ["SYNOPSIS does not show %s" % c for c in sorted(cmds - synopsis)]
    errors += ["COMMANDS documents %s, which tensorctl --help does not list" % c
               for c in sorted(documented - cmds - aliases)]
    errors += ["SYNOPSIS shows %s, which tensorctl --help does not list" % c
               for c in sorted(synopsis - cmds - aliases)]
    assert not errors, "%s:\n  %s" % (path, "\n  ".join(errors))


def test_man_pages_have_balanced_quotes():
    """A macro line with an odd number of quotes shows a stray '"' (as two
    tensorctl(1) headings once did)."""
    errors = []
    for name in ("tensord.8", "tensorctl.1"):
        with open(os.path.join(ROOT, "docs", name), encoding="utf-8") as f:
            for n, line in enumerate(f.read().splitlines(), 1):
                if re.match(r"^\.[A-Z]", line) and line.replace('\\"', "").count('"') % 2:
                    errors.append("%s:%d: %s" % (name, n, line))
    assert not errors, "unbalanced quotes:\n  " + "\n  ".join(errors)


def test_man_tensorctl_synopsis_file_types():
    """Every FILE.ext form of `tensorctl --help` (F.safetensors, FILE.comp...)
    is in tensorctl(1)'s SYNOPSIS."""
    secs = man_sections(os.path.join(ROOT, "docs", "tensorctl.1"))
    synopsis = " ".join(roff_text(l) for l in secs["SYNOPSIS"])
    text = run([TENSORCTL, "--help"]).stdout
    forms = set(re.findall(r"\b[A-Z]+\.[a-z]+\b", text[:text.index("Options:")]))
    assert {"F.npy", "F.safetensors"} <= forms, forms
    missing = sorted(f for f in forms if f not in synopsis)
    assert not missing, "tensorctl(1) SYNOPSIS lacks %s" % ", ".join(missing)


def synopsis_options(text):
    """{--option: optional?} of a synopsis line, optional meaning inside [...]."""
    out, depth = {}, 0
    for tok in re.finditer(r"--[a-z][a-z0-9-]*|\[|\]", text):
        t = tok.group(0)
        depth += {"[": 1, "]": -1}.get(t, 0)
        if t.startswith("--"):
            out[t] = out.get(t, True) and depth > 0
    return out


def synopsis_forms(forms, cmd, rest):
    """Add one form of `cmd` (the text after it) to `forms`, keyed by the
    command and its leading option (train --model, info --watch, ...)."""
    m = re.match(r"\s*(--[a-z-]+)", rest)
    forms.setdefault((cmd, m.group(1) if m else ""), {}).update(synopsis_options(rest))


def test_man_tensorctl_synopsis_matches_each_commands_help():
    """Each form of each command in tensorctl(1)'s SYNOPSIS has the same
    options, each optional or required alike, as that command's usage lines
    in `tensorctl help CMD` (they once disagreed on train --model: --detach
    missing, --data and --batch-size optional in one, required in the other)."""
    with open(os.path.join(ROOT, "docs", "tensorctl.1")) as f:
        src = f.read()
    man, helps = {}, {}
    for entry in src[src.index(".SH SYNOPSIS"):src.index(".SH DESCRIPTION")].split(".br"):
        lines = [l.replace("\\-", "-").replace("\\fB", "").replace("\\fP", "")
                 for l in entry.splitlines() if l.strip()]
        at = [k for k, l in enumerate(lines) if l.startswith(".RI [ OPTIONS ]")]
        if not at:
            continue
        words = " ".join(re.sub(r"^\.[A-Z]+\s*", "", l) for l in lines[at[0] + 1:]).replace('"', "").split()
        synopsis_forms(man, words[0], " ".join(words[1:]))
    for cmd in sorted({k[0] for k in man}):
        usage = run([TENSORCTL, "help", cmd]).stdout.split("\n\n")[0].replace("Usage:", "")
        forms = []
        for line in usage.splitlines():
            s = line.strip()
            if s.startswith("tensorctl "):
                forms.append(s[len("tensorctl "):])
            elif forms:
                forms[-1] += " " + s
        for form in forms:
            words = form.split()
            synopsis_forms(helps, words[0], " ".join(words[1:]))
    assert len(man) >= 20, sorted(man)
    bad = ["%s: man %r, help %r" % (" ".join(k).strip(), man.get(k), helps.get(k))
           for k in sorted(set(man) | set(helps)) if man.get(k) != helps.get(k)]
    assert not bad, "tensorctl(1) SYNOPSIS and tensorctl help disagree:\n  " + "\n  ".join(bad)


def test_shipped_service_persists():
    """tensord.conf no longer sets persist = yes: the service persists because
    systemd's StateDirectory= passes $STATE_DIRECTORY (as the unit does), with
    the shipped file, which itself sets neither persist nor state_dir."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
    from daemon import Daemon, RPCError  # noqa: E402 - needs TENSORD_BIN only here
    conf = os.path.join(ROOT, "systemd", "tensord.conf")
    tensor = {"name": "kept", "dtype": "u8", "shape": [3], "data": b"abc"}
    with tempfile.TemporaryDirectory(prefix="tensord-drift-") as tmp:
        state = os.path.join(tmp, "state")
        saved = dict(os.environ)
        try:
            os.environ.pop("TENSORD_SOCKET", None)
            os.environ["STATE_DIRECTORY"] = state
            with Daemon(["--config", conf]) as d, d.client() as c:
                c.call("tensor.put", tensor)
                c.call("store.sync", {})
            assert os.listdir(os.path.join(state, "tensors")), "nothing checkpointed"
            with Daemon(["--config", conf]) as d, d.client() as c:
                got = c.call("tensor.get", {"name": "kept"})
                assert bytes(got["data"]) == b"abc", got
            # Without $STATE_DIRECTORY (a daemon started by hand) the file
            # must not turn persistence on: not run, as the daemon would then
            # use /var/lib/tensord; the file's text says it.
            with open(conf, encoding="utf-8") as f:
                assert not re.search(r"^\s*(persist|state_dir)\s*=", f.read(), re.M), \
                    "%s sets persist or state_dir" % conf
        finally:
            os.environ.clear()
            os.environ.update(saved)


def main():
    if not TENSORD or not TENSORCTL:
        print("TENSORD_BIN and TENSORCTL_BIN must be set")
        return 1
    failed = 0
    for name, fn in [(k, v) for k, v in globals().items() if k.startswith("test_") and callable(v)]:
        try:
            fn()
            print("ok   %s" % name)
        except Exception:  # noqa: BLE001 - report every failure, then fail
            failed += 1
            print("FAIL %s" % name)
            traceback.print_exc(file=sys.stdout)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
