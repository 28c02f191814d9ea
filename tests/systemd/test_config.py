"""tensord --check-config, and the paths of a daemon run by a user (issue 19).

--check-config FILE (tensord(8)):
- a good file (every key, as --print-config writes them) prints "FILE: ok",
  exit 0;
- a bad one prints every error with its line number, in order, exit 1; the
  first is the error the daemon itself gives for the file at start-up;
- an unreadable file (missing, a directory) exits 1; a usage error exits 2;
- it opens no device (it works with no Vulkan driver at all), no socket and
  no state directory: the socket and state paths of its environment, flags
  and of a user's XDG directories stay absent.

A daemon run by a user other than root without --socket, --state-dir or
systemd's StateDirectory=/RuntimeDirectory= (docs/durability.md, "Where state
goes"): a user created here runs tensord with HOME and the XDG variables in a
temporary directory; its socket is $XDG_RUNTIME_DIR/tensord/tensord.sock, its
state directory (and so the pipeline cache) ~/.local/state/tensord, both
created 0700 and owned by the user, without persistence (no tensors/);
/var/lib/tensord and /run/tensord are left as they were. $XDG_STATE_HOME
moves the state directory; without $XDG_RUNTIME_DIR the daemon refuses to
start and names --socket; root and systemd's directories keep the old paths.

A reload that changes every key (the keys of `tensord --print-config`, so a
new key must be added here): each is logged once, "reload: KEY OLD -> NEW"
for the keys tensord(8) marks Reloadable (and they take effect), "reload: KEY
changed (OLD -> NEW) but applies only at start-up; kept OLD" for the others.

Run as root with /usr/bin/python3; TENSORD_BIN names the daemon; SOURCE_ROOT
the tree (for docs/tensord.8).
"""
import os
import pwd
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from daemon import Client, sanitizer_env  # noqa: E402

BIN = os.environ["TENSORD_BIN"]
USER = "tensord-cfgtest"
USER_BIN = None     # a copy of BIN that the user can run (the build tree may not be)
failures = []
passed = 0


def check(cond, what):
    global passed
    if cond:
        passed += 1
        print("ok:", what, flush=True)
    else:
        failures.append(what)
        print("FAIL:", what, flush=True)


def clean_env(**extra):
    """Our environment without anything that names tensord's paths."""
    env = {k: v for k, v in sanitizer_env().items()
           if k not in ("TENSORD_SOCKET", "STATE_DIRECTORY", "RUNTIME_DIRECTORY", "LISTEN_FDS",
                        "LISTEN_PID", "NOTIFY_SOCKET", "XDG_STATE_HOME", "XDG_RUNTIME_DIR",
                        "WATCHDOG_USEC", "WATCHDOG_PID")}
    env.update(extra)
    return env


def run(argv, env=None, user=None):
    kw = {}
    binary = BIN
    if user:
        kw = dict(user=user.pw_uid, group=user.pw_gid, extra_groups=[])
        binary = USER_BIN
    return subprocess.run([binary] + argv, env=env or clean_env(), stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=60, **kw)


def write(path, text):
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, 0o644)


def snapshot(path):
    """What a system path looks like: absent, or its listing and times."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    listing = sorted(os.listdir(path)) if stat.S_ISDIR(st.st_mode) else []
    return (st.st_mode, st.st_mtime_ns, st.st_ctime_ns, listing)


# ---- --check-config ---------------------------------------------------------

def bad_arguments():
    """An unknown option or a stray argument: exit 2, the reason and one
    "Try 'tensord --help'" line, as GNU tools do -- not the whole help
    (issue 35)."""
    for argv, why in ((["--bogus"], "unrecognized option '--bogus'"),
                      (["extra"], "unexpected argument 'extra'")):
        r = run(argv)
        lines = r.stderr.strip().splitlines()
        check(r.returncode == 2 and len(lines) == 2 and why in lines[0] and
              lines[1] == "Try 'tensord --help' for more information.",
              "tensord %s: exit 2 and two lines (%d, %r)" % (" ".join(argv), r.returncode, lines))


def check_config(tmp):
    good = os.path.join(tmp, "good.conf")
    # Every key with the value the daemon prints: a file it must take.
    printed = run(["--print-config"]).stdout
    write(good, "# every key\n" + printed.replace("max_tensors = 65536", "max_tensors = 1000"))
    p = run(["--check-config", good])
    check(p.returncode == 0 and p.stdout == "%s: ok\n" % good and p.stderr == "",
          "a good file: 'FILE: ok', exit 0 (rc %d, %r %r)" % (p.returncode, p.stdout, p.stderr))

    bad = os.path.join(tmp, "bad.conf")
    write(bad, "# comment\n"
               "max_tensors = 10\n"
               "bogus_key = 1\n"
               "\n"
               "max_tensors = banana\n"
               "no equals sign here\n"
               "max_inflight = 0\n"
               "device = 0,\n"
               "max_connections = " + "1" * 1100 + "\n"
               "verbose = yes\n"
               "user_weights = 0:0\n"
               "user_weights = @nosuchgroupxyz:2\n"
               "user_weights = 0:1 1001\n")
    want = ["%s:3: unknown setting 'bogus_key'" % bad,
            "%s:5: invalid value 'banana' for 'max_tensors'" % bad,
            "%s:6: expected 'key = value'" % bad,
            "%s:7: invalid value '0' for 'max_inflight'" % bad,
            "%s:8: invalid value '0,' for 'device'" % bad,
            "%s:9: line too long" % bad,
            "%s:11: invalid value '0:0' for 'user_weights'" % bad,
            "%s:12: invalid value '@nosuchgroupxyz:2' for 'user_weights'" % bad,
            "%s:13: invalid value '0:1 1001' for 'user_weights'" % bad]
    p = run(["--check-config", bad])
    lines = p.stderr.splitlines()
    check(p.returncode == 1 and p.stdout == "" and lines[:len(want)] == want and
          lines[len(want):] == ["%s: 9 errors" % bad],
          "a bad file: every error with its line, in order, exit 1 (rc %d, %r)"
          % (p.returncode, lines))
    # The daemon itself refuses the file with the first of them.
    p2 = run(["--config", bad, "--print-config"])
    check(p2.returncode == 2 and p2.stderr.strip() == "tensord: " + want[0],
          "the daemon refuses it with the same first error (rc %d, %r)"
          % (p2.returncode, p2.stderr))

    for what, path in (("a missing file", os.path.join(tmp, "absent.conf")), ("a directory", tmp)):
        p = run(["--check-config", path])
        check(p.returncode == 1 and p.stderr.startswith(path + ": ") and p.stdout == "",
              "%s: exit 1 with the reason (rc %d, %r)" % (what, p.returncode, p.stderr))
    # The daemon took a directory as an empty file before.
    p = run(["--config", tmp, "--print-config"])
    check(p.returncode == 2 and "Is a directory" in p.stderr,
          "--config DIR is refused (rc %d, %r)" % (p.returncode, p.stderr))

    for argv in (["--check-config"], ["--check-config", good, "extra"],
                 ["--check-config", good, "--print-config"], ["--check-config", good, "--device", "x"]):
        p = run(argv)
        check(p.returncode == 2, "usage error %r: exit 2 (rc %d)" % (argv[1:], p.returncode))

    # No device, socket or state directory: no Vulkan driver at all, and every
    # path it could be told about stays absent.
    paths = {k: os.path.join(tmp, k) for k in ("envsock", "envstate", "flagsock", "flagstate",
                                                "xdgrun", "xdgstate")}
    env = clean_env(TENSORD_SOCKET=os.path.join(paths["envsock"], "s.sock"),
                    STATE_DIRECTORY=paths["envstate"],
                    VK_ICD_FILENAMES=os.path.join(tmp, "no-such-icd.json"),
                    VK_DRIVER_FILES=os.path.join(tmp, "no-such-icd.json"))
    p = run(["--check-config", good, "--socket", os.path.join(paths["flagsock"], "s.sock"),
             "--state-dir", paths["flagstate"]], env=env)
    check(p.returncode == 0, "check-config needs no Vulkan driver (rc %d, %r)" % (p.returncode, p.stderr))
    user = pwd.getpwnam(USER)
    env = clean_env(HOME=os.path.join(tmp, "nohome"), XDG_RUNTIME_DIR=paths["xdgrun"],
                    XDG_STATE_HOME=paths["xdgstate"], XDG_CACHE_HOME=os.path.join(tmp, "nocache"))
    p = run(["--check-config", good], env=env, user=user)
    check(p.returncode == 0, "check-config as a user (rc %d, %r)" % (p.returncode, p.stderr))
    left = [k for k, v in paths.items() if os.path.exists(v)]
    left += [d for d in ("nohome", "nocache") if os.path.exists(os.path.join(tmp, d))]
    check(not left, "check-config created nothing (found %r)" % left)


# ---- a daemon run by a user ---------------------------------------------------

def wait_socket(proc, path, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        if os.path.exists(path):
            try:
                Client(path).close()
                return True
            except OSError:
                pass
        time.sleep(0.05)
    return False


def user_daemon(tmp):
    user = pwd.getpwnam(USER)
    root = os.path.join(tmp, "u")
    home, run_dir = os.path.join(root, "home"), os.path.join(root, "run")
    for d in (root, home, run_dir):
        os.mkdir(d, 0o700)
        os.chown(d, user.pw_uid, user.pw_gid)
    os.chmod(root, 0o755)
    binary = USER_BIN
    env = clean_env(HOME=home, XDG_RUNTIME_DIR=run_dir, XDG_CACHE_HOME=os.path.join(home, ".cache"),
                    USER=USER, LOGNAME=USER)
    kw = dict(user=user.pw_uid, group=user.pw_gid, extra_groups=[])
    system = {p: snapshot(p) for p in ("/var/lib/tensord", "/run/tensord")}

    p = subprocess.run([binary, "--print-config"], env=env, capture_output=True, text=True,
                       timeout=60, **kw)
    sock = os.path.join(run_dir, "tensord", "tensord.sock")
    state = os.path.join(home, ".local", "state", "tensord")
    check(p.returncode == 0 and "socket = %s\n" % sock in p.stdout and
          "state_dir = %s\n" % state in p.stdout and "persist = auto\n" in p.stdout,
          "--print-config as a user names the XDG paths (%r)" % p.stdout[:200])

    log = os.path.join(root, "tensord.log")
    with open(log, "wb") as logf:
        proc = subprocess.Popen([binary], env=env, stdin=subprocess.DEVNULL, stdout=logf,
                                stderr=subprocess.STDOUT, **kw)
    try:
        up = wait_socket(proc, sock)
        check(up, "a user's daemon serves on $XDG_RUNTIME_DIR/tensord/tensord.sock")
        if up:
            c = Client(sock)
            c.call("tensor.put", {"name": "a", "dtype": "f32", "shape": [4], "data": bytes(16)})
            c.call("op.run", {"op": "add", "inputs": ["a", "a"], "out": "b"})
            c.close()
            sdir = os.stat(os.path.dirname(sock))
            check(stat.S_IMODE(sdir.st_mode) == 0o700 and sdir.st_uid == user.pw_uid,
                  "the socket's directory is the user's, 0700 (%o)" % sdir.st_mode)
            # Clients find the user's own daemon by themselves (issue 35):
            # no --socket, no $TENSORD_SOCKET.
            py = subprocess.run(
                ["/usr/bin/python3", "-c", "import tensord; c = tensord.Client(); "
                 "c.put('mine', [1.0, 2.0, 3.0, 4.0], 'f32'); print(c.stat('mine')['shape'])"],
                env=dict(env, PYTHONPATH=os.path.join(os.environ["SOURCE_ROOT"], "python")),
                capture_output=True, text=True, timeout=60, **kw)
            check(py.returncode == 0 and "[4]" in py.stdout,
                  "the Python client finds $XDG_RUNTIME_DIR/tensord/tensord.sock (%r %r)"
                  % (py.stdout, py.stderr[-300:]))
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(60)
        check(rc == 0, "the user's daemon exits 0 on SIGTERM (%d)" % rc)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = open(log, errors="replace").read()
    ok_state = os.path.isdir(state)
    if ok_state:
        st = os.stat(state)
        for d in (state, os.path.dirname(state), os.path.dirname(os.path.dirname(state))):
            dst = os.stat(d)
            check(stat.S_IMODE(dst.st_mode) == 0o700 and dst.st_uid == user.pw_uid,
                  "%s created 0700, the user's (%o, uid %d)" % (d, dst.st_mode, dst.st_uid))
        listing = sorted(os.listdir(state))
        check("pipeline-cache.bin" in listing and "tensors" not in listing and "models" not in listing,
              "the pipeline cache is kept there, no checkpoints (persist = auto: off) %r" % listing)
    else:
        check(False, "state directory %s created" % state)
    check(not os.path.exists(sock), "the socket is removed at exit")
    after = {p: snapshot(p) for p in system}
    check(after == system, "/var/lib/tensord and /run/tensord untouched (%r -> %r)" % (system, after))
    if failures:
        sys.stderr.write("---- tensord log ----\n%s---- end ----\n" % text)

    # $XDG_STATE_HOME moves the state directory.
    xstate = os.path.join(home, "xdg-state")
    p = subprocess.run([binary, "--print-config"], env=dict(env, XDG_STATE_HOME=xstate),
                       capture_output=True, text=True, timeout=60, **kw)
    check("state_dir = %s/tensord\n" % xstate in p.stdout, "$XDG_STATE_HOME/tensord (%r)" % p.stdout[:200])
    # Given paths and systemd's directories win; so does root.
    for extra, want in (({"STATE_DIRECTORY": "/var/lib/tensord"}, "state_dir = /var/lib/tensord\n"),
                        ({"RUNTIME_DIRECTORY": "/run/tensord"}, "socket = /run/tensord/tensord.sock\n"),
                        ({"TENSORD_SOCKET": "/tmp/x.sock"}, "socket = /tmp/x.sock\n")):
        p = subprocess.run([binary, "--print-config"], env=dict(env, **extra), capture_output=True,
                           text=True, timeout=60, **kw)
        check(want in p.stdout, "as a user with %r: %r" % (extra, want.strip()))
    p = subprocess.run([binary, "--print-config"], env=env, capture_output=True, text=True, timeout=60)
    check("socket = /run/tensord/tensord.sock\n" in p.stdout and
          "state_dir = /var/lib/tensord\n" in p.stdout, "root keeps the system paths")

    # No $XDG_RUNTIME_DIR: refused, naming --socket, with nothing created.
    env2 = dict(env)
    del env2["XDG_RUNTIME_DIR"]
    shutil.rmtree(os.path.join(home, ".local"), ignore_errors=True)
    p = subprocess.run([binary], env=env2, capture_output=True, text=True, timeout=60, **kw)
    check(p.returncode == 1 and "--socket" in p.stderr and "XDG_RUNTIME_DIR" in p.stderr and
          not os.path.exists(os.path.join(home, ".local")),
          "no $XDG_RUNTIME_DIR: exit 1 naming --socket (rc %d, %r)" % (p.returncode, p.stderr))


# ---- a reload that changes every key --------------------------------------------

def man_reloadable():
    """{key: True when tensord(8) marks it Reloadable} from CONFIGURATION FILE."""
    root = os.environ.get("SOURCE_ROOT") or os.path.join(os.path.dirname(__file__), "..", "..")
    text = open(os.path.join(root, "docs", "tensord.8")).read()
    sec = text.split("\n.SH CONFIGURATION FILE\n", 1)[1].split("\n.SH ", 1)[0]
    marks = {}
    for entry in sec.split("\n.TP\n")[1:]:
        m = re.match(r"\.B ([a-z_]+)\n", entry)
        if m:
            marks[m.group(1)] = "Reloadable" in entry.split("\n.PP\n")[0]
    return marks


def printed(conf):
    out = run(["--config", conf, "--print-config"]).stdout
    return dict(line.split(" = ", 1) for line in out.splitlines())


def reload_every_key(tmp):
    d = os.path.join(tmp, "r")
    os.mkdir(d, 0o700)
    conf = os.path.join(d, "tensord.conf")
    write(conf, "socket = %s/s.sock\nstate_dir = %s/state\npersist = no\nmax_connections = 200\n"
          % (d, d))
    new = {"socket": d + "/other.sock", "state_dir": d + "/other-state", "persist": "yes",
           "checkpoint_interval": "31", "device": "cpu", "max_tensors": "1000",
           "max_connections": "100", "max_tensor_bytes": "64K", "max_message_bytes": "8M",
           "block_size": "1M", "max_device_bytes": "1G", "user_max_tensors": "10",
           "user_max_bytes": "1M", "max_connections_per_user": "5", "max_inflight": "3",
           "max_output_backlog": "1M", "stall_timeout": "7", "input_timeout": "9",
           "max_input_bytes": "1M", "user_max_buffer_bytes": "512M", "user_max_models": "6",
           "user_max_kernels": "2", "user_max_jobs": "3", "user_weights": "0:2 @0:5",
           "user_quota_tensors": "0:7", "user_quota_bytes": "@0:2M", "user_quota_jobs": "0:2", "user_gpu_hour": "0:60",
           "request_timeout": "2.5", "stop_timeout": "11",
           "kernel_group": "0", "kernel_timeout": "3", "host_mapped": "no", "async_graphs": "no",
           "batch_requests": "no",
           "cluster": "yes", "cluster_timeout": "5",
           "verbose": "yes"}
    old = printed(conf)
    marks = man_reloadable()
    check(set(new) == set(old) == set(marks),
          "the test, --print-config and tensord(8) know the same keys (%r)"
          % (set(old) ^ set(new) | set(old) ^ set(marks)))
    log = os.path.join(d, "tensord.log")
    with open(log, "wb") as logf:
        proc = subprocess.Popen([BIN, "--config", conf], env=clean_env(), stdin=subprocess.DEVNULL,
                                stdout=logf, stderr=subprocess.STDOUT)
    try:
        sock = os.path.join(d, "s.sock")
        if not wait_socket(proc, sock):
            check(False, "the daemon serves")
            return
        newconf = os.path.join(d, "new.conf")
        write(newconf, "".join("%s = %s\n" % kv for kv in new.items()))
        want_new = printed(newconf)
        os.rename(newconf, conf)
        proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 30
        while "configuration reloaded" not in open(log).read() and time.monotonic() < deadline:
            time.sleep(0.05)
        lines = [l[len("tensord: "):] for l in open(log).read().splitlines() if "reload: " in l]
        want = []
        for k in old:  # the daemon's key order
            if marks.get(k):
                want.append("reload: %s %s -> %s" % (k, old[k], want_new[k]))
            else:
                want.append("reload: %s changed (%s -> %s) but applies only at start-up; kept %s"
                            % (k, old[k], want_new[k], old[k]))
        check(lines == want, "a reload that changes every key logs each once, applied or kept as "
              "tensord(8) says (unexpected %r, missing %r)"
              % ([l for l in lines if l not in want], [w for w in want if w not in lines]))
        c = Client(sock)
        info = c.call("info")
        c.close()
        check(info["limits"]["max_tensors"] == 1000, "the reloaded max_tensors is in force")
        check(not os.path.exists(new["socket"]) and not os.path.exists(new["state_dir"]),
              "the start-up-only socket and state_dir stay")
        proc.send_signal(signal.SIGTERM)
        check(proc.wait(60) == 0, "exit 0")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if failures:
            sys.stderr.write("---- tensord log ----\n%s---- end ----\n" % open(log).read())


def main():
    created = False
    try:
        pwd.getpwnam(USER)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "--home-dir", "/nonexistent",
                        "--shell", "/usr/sbin/nologin", USER], check=True)
        created = True
    global USER_BIN
    tmp = tempfile.mkdtemp(prefix="tensord-config-", dir="/tmp")
    try:
        os.chmod(tmp, 0o755)
        os.mkdir(os.path.join(tmp, "bin"), 0o755)
        USER_BIN = os.path.join(tmp, "bin", "tensord")
        shutil.copy2(BIN, USER_BIN)
        os.chmod(USER_BIN, 0o755)
        bad_arguments()
        check_config(tmp)
        user_daemon(tmp)
        reload_every_key(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if created:
            subprocess.run(["userdel", USER], check=False)
    print("%d passed, %d failed" % (passed, len(failures)))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    if os.geteuid() != 0:
        print("SKIP: needs root (creates a user)")
        sys.exit(77)
    main()
