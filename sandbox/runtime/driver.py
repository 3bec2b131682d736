# The driver of every session: installed as the module _sandchat before the base
# snapshot is taken (runtime/worker/boot.ts), so every restored session has it.
#
# It runs in __main__'s namespace, the user's globals, after display.py (the display
# steps): each step of the install is a function of its own, called once by _install,
# and every name they leave there is deleted at the end. What the steps make lives on in
# their closures, in the hooks they set and in the module _sandchat.
import sys, types, traceback, linecache, os, random, importlib.abc, importlib.util, importlib.machinery

_m = types.ModuleType("_sandchat")
sys.modules["_sandchat"] = _m
os.environ.setdefault("MPLBACKEND", "Agg")


def _import_caches():
    # forget_listings: what the file system's import caches forget when files appear;
    # compiled: the compiled extension modules loaded (a heap holding them cannot be
    # saved).
    seen_modules = [0, []]

    def forget_listings(under=None):
        # What importlib.invalidate_caches() does for the file system, and no more: the
        # finders of sys.path (those under `under`, if given) forget their directory
        # listings, folders found missing are looked at again, and namespace packages
        # recompute their portions. Not the stdlib zip's directory, which never changes,
        # and importlib.metadata's caches only if it is loaded: invalidate_caches()
        # re-reads the one and imports the other, ~2.3 MB of the heap rewritten, which
        # every later checkpoint of the session then saves.
        for path, finder in list(sys.path_importer_cache.items()):
            if under is not None and path != under and not path.startswith(under + "/"):
                continue
            if finder is None:
                del sys.path_importer_cache[path]  # a folder that did not exist may now
            elif isinstance(finder, importlib.machinery.FileFinder):
                finder.invalidate_caches()
        ns = getattr(sys.modules.get("importlib._bootstrap_external"), "_NamespacePath", None)
        if ns is not None:
            ns._epoch += 1
        md = sys.modules.get("importlib.metadata")
        if under is None and md is not None:
            md.MetadataPathFinder.invalidate_caches()

    def compiled():
        # Asked after every run; modules are only ever added, so count first.
        if len(sys.modules) != seen_modules[0]:
            seen_modules[0] = len(sys.modules)
            seen_modules[1] = [n for n, m in list(sys.modules.items())
                               if str(getattr(m, "__file__", None) or "").endswith(".so")]
        return seen_modules[1]

    return forget_listings, compiled


def _cell_runner(show_result, compiled):
    # run and run_async: a cell run in __main__, answered as (status, repr of its value,
    # its exception as (type, message, traceback), the compiled modules loaded).
    import __main__
    INTERNAL = ("/_pyodide/", "/pyodide/", "<sandchat>")

    def strip(e, seen=None):
        # Tracebacks keep only frames the user can act on.
        seen = seen if seen is not None else set()
        if e is None or id(e) in seen:
            return
        seen.add(id(e))
        tbs = []
        tb = e.__traceback__
        while tb is not None:
            if not any(s in tb.tb_frame.f_code.co_filename for s in INTERNAL):
                tbs.append(tb)
            tb = tb.tb_next
        for a, b in zip(tbs, tbs[1:] + [None]):
            a.tb_next = b
        e.__traceback__ = tbs[0] if tbs else None
        strip(e.__cause__, seen)
        strip(e.__context__, seen)

    def hint(e):
        # Not for an import the distribution's finder answered: it said why already.
        if isinstance(e, ModuleNotFoundError) and e.name and "." not in e.name and not getattr(e, "_sandchat_said", False):
            return (" (the sandbox has the Python standard library and the packages of its"
                    " Pyodide package mirror; pure-Python packages can be installed with"
                    " await micropip.install('name'))")
        return ""

    from pyodide.code import CodeRunner
    import ast, inspect

    def ok(value, limit):
        if value is None:
            return ("success", None, None, compiled())
        r = show_result(value)
        if len(r) > limit:
            r = r[:limit] + "\n[... repr truncated ...]"
        return ("success", r, None, compiled())

    def failed(e):
        strip(e)
        msg = str(e) + hint(e)
        tb = "".join(traceback.format_exception(e))
        if hint(e):
            tb = tb.rstrip("\n") + hint(e) + "\n"
        return ("error", None, (type(e).__name__, msg, tb), compiled())

    def flush():
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except BaseException:
            pass

    pending = []

    def run(code, filename, limit):
        # Code without top-level await runs synchronously: no event loop turn, and no
        # coroutine left holding JS references when the heap is saved.
        linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
        try:
            runner = CodeRunner(code, filename=filename, flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT).compile()
            if runner.code is not None and runner.code.co_flags & inspect.CO_COROUTINE:
                pending.append(runner)
                return None
            return ok(runner.run(__main__.__dict__), limit)
        except BaseException as e:
            return failed(e)
        finally:
            flush()

    async def run_async(limit):
        runner = pending.pop()
        try:
            return ok(await runner.run_async(__main__.__dict__), limit)
        except BaseException as e:
            return failed(e)
        finally:
            flush()

    return run, run_async


def _interruptible_sleep():
    # time.sleep that a Stop or a time limit interrupts (worker/interrupt.ts,
    # sandchatSleep): KeyboardInterrupt is raised inside the sleep, so what the cell set
    # before it stays, as in Jupyter.
    import time, operator
    def sleep(secs):
        if not isinstance(secs, float):
            secs = operator.index(secs)
        if secs < 0:
            raise ValueError("sleep length must be non-negative")
        import js
        if js.sandchatSleep(float(secs)):
            raise KeyboardInterrupt
    sleep.__doc__ = time.sleep.__doc__
    time.sleep = sleep


def _no_input_or_processes():
    # input() and os.system() say plainly that the sandbox has neither.
    import builtins

    def no_input(prompt=""):
        raise EOFError("input() is not available: the sandbox has no interactive stdin; "
                       "put the data in the code or upload a file and read it under /data")
    builtins.input = no_input

    def no_processes(*args, **kwargs):
        raise OSError(138, "processes are not available in the sandbox")
    # Emscripten's system() reaches for node:child_process and wedges the interpreter
    # when it is missing; the Worker has no run permission either way.
    import posix
    os.system = posix.system = no_processes


def _micropip(forget_listings):
    # micropip: sandchat's own, shadowing Pyodide's. The session has no network: the
    # engine resolves, fetches and verifies wheels and the Worker installs them
    # (worker/pip.ts).
    import json as _pjson

    mp = types.ModuleType("micropip")
    mp.__doc__ = ("sandchat's micropip: install() asks the sandbox engine, which fetches "
                  "pure-Python wheels from its package index; list() shows what is installed.")

    async def install(requirements, keep_going=False, deps=True, credentials=None, pre=False,
                      index_urls=None, *, verbose=False, **kwargs):
        import js
        if isinstance(requirements, str):
            requirements = [requirements]
        reqs = [str(r) for r in requirements]
        ask = _pjson.dumps({"requirements": reqs, "deps": bool(deps), "keepGoing": bool(keep_going)})
        answer = _pjson.loads(str(await js.sandchatPip(ask)))
        if answer.get("error"):
            raise ValueError(answer["error"])
        forget_listings()

    class Package:
        def __init__(self, name, version, source):
            self.name, self.version, self.source = name, version, source
        def __repr__(self):
            return f"{self.name}=={self.version} ({self.source})"

    def list_():
        import js
        return {d["name"]: Package(d["name"], d["version"], d["source"])
                for d in _pjson.loads(str(js.sandchatPipList()))}

    mp.install, mp.list, mp.Package = install, list_, Package
    sys.modules["micropip"] = mp


def _distribution_finder(forget_listings):
    # Last on sys.meta_path: asked only when no other finder has the module. If a
    # package of the Pyodide distribution provides it, the engine serves it (within the
    # run's package bounds) and the Worker loads it, so importlib.import_module and
    # __import__ load packages as import statements do.
    import json as _pjson
    from pyodide.ffi import can_run_sync, run_sync

    def said(e):
        e._sandchat_said = True
        return e

    class DistributionFinder(importlib.abc.MetaPathFinder):
        inflight = set()

        def find_spec(self, name, path, target=None):
            if path is not None or name in self.inflight:
                return None
            import js
            if not can_run_sync():
                # Plain code cannot wait for a download: say what loads it.
                pkg = str(js.sandchatImportable(name))
                if pkg:
                    raise said(ModuleNotFoundError(
                        f"No module named {name!r} yet: it is in the package {pkg!r}, which loads when "
                        f"the code imports it with a statement (import {name}) or in a cell that awaits "
                        f"(for example after `await asyncio.sleep(0)`)", name=name))
                return None
            self.inflight.add(name)
            try:
                answer = str(run_sync(js.sandchatImport(name)))
            finally:
                self.inflight.discard(name)
            if not answer:
                return None
            answer = _pjson.loads(answer)
            if answer.get("error"):
                raise said(ModuleNotFoundError(f"No module named {name!r}: {answer['error']}", name=name))
            forget_listings()
            return importlib.machinery.PathFinder.find_spec(name)

    sys.meta_path.append(DistributionFinder())


def _reseed():
    # A snapshot freezes the RNG: two sessions from one base would draw the same numbers.
    random.seed()


def _install():
    forget_listings, compiled = _import_caches()
    display, show_result, emit, clear_output, handle, update_display = _rich_display()
    _ipython_display(display, clear_output, handle, update_display)
    _pyplot_figures(emit)
    run, run_async = _cell_runner(show_result, compiled)
    _interruptible_sleep()
    _no_input_or_processes()
    _micropip(forget_listings)
    _distribution_finder(forget_listings)

    import builtins
    builtins.display = display
    # The top-level modules this driver provides: Pyodide's own packages of these names
    # are never loaded for them (worker/pyodide.ts, forgetProvided), nor fetched
    # (pkgs.Provided).
    _m.provided = ("micropip", "IPython")
    _m.display = display
    _m.run = run
    _m.run_async = run_async
    _m.reseed = _reseed
    _m.compiled = compiled
    _m.forget_listings = forget_listings

_install()
del (_install, _m, _import_caches, _rich_display, _ipython_display, _pyplot_figures, _cell_runner,
     _interruptible_sleep, _no_input_or_processes, _micropip, _distribution_finder, _reseed)
