"""Print the directory, relative to the prefix in argv[1] when inside it, where
`meson install` puts the tensord package: a site-packages directory of this
Python under that prefix that this Python searches, else the standard
posix_prefix one (lib/python3.X/site-packages, which needs PYTHONPATH).

Debian's Python searches /usr/local/lib/python3.X/dist-packages (its
"posix_local" scheme, based on /usr) and /usr/lib/python3/dist-packages (its
"deb_system" scheme); a plain `sysconfig.get_path('purelib')` with base
/usr/local gives /usr/local/local/..., and meson's default gives
/usr/local/lib/python3/dist-packages, which it never searches."""
import os
import sys
import sysconfig


def purelib(prefix):
    prefix = os.path.normpath(prefix)
    searched = {os.path.normpath(p) for p in sys.path if p}
    schemes = [s for s in ("deb_system", sysconfig.get_default_scheme(), "posix_prefix")
               if s in sysconfig.get_scheme_names()]
    for scheme in schemes:
        for base in (prefix, "/usr"):
            try:
                path = sysconfig.get_path("purelib", scheme, vars={"base": base, "platbase": base})
            except KeyError:
                continue
            path = os.path.normpath(path)
            if path in searched and path.startswith(prefix.rstrip("/") + "/"):
                return path
    return os.path.normpath(sysconfig.get_path("purelib", "posix_prefix",
                                               vars={"base": prefix, "platbase": prefix}))


def main():
    prefix = sys.argv[1]
    path = purelib(prefix)
    if path.startswith(os.path.normpath(prefix).rstrip("/") + "/"):
        path = os.path.relpath(path, prefix)
    print(path)


if __name__ == "__main__":
    main()
