# The driver of every session: installed as the module _sandchat before the base
# snapshot is taken (runtime/worker.ts, "boot"), so every restored session has it.
import sys, types, traceback, linecache, os, random, importlib.abc, importlib.util, importlib.machinery

_m = types.ModuleType("_sandchat")
sys.modules["_sandchat"] = _m
os.environ.setdefault("MPLBACKEND", "Agg")

def _install():
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

    # time.sleep that a Stop or a time limit interrupts (worker.ts, sandchatSleep):
    # KeyboardInterrupt is raised inside the sleep, so what the cell set before it stays,
    # as in Jupyter.
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

    def reseed():
        # A snapshot freezes the RNG: two sessions from one base would draw the same numbers.
        random.seed()

    # ---- display: Jupyter's MIME bundles ----
    import base64, json as _json

    REPRS = (("text/html", "_repr_html_"), ("text/markdown", "_repr_markdown_"),
             ("image/svg+xml", "_repr_svg_"), ("image/png", "_repr_png_"),
             ("image/jpeg", "_repr_jpeg_"), ("application/json", "_repr_json_"),
             ("text/latex", "_repr_latex_"))

    def method(obj, name):
        # Looked up on the type, as IPython does: objects whose __getattr__ answers
        # everything (proxies, mocks) must not look like they have every repr.
        f = getattr(type(obj), name, None)
        return getattr(obj, name) if f is not None else None

    def figure_png(obj):
        t = type(obj)
        if not (t.__module__.startswith("matplotlib.") and t.__name__ == "Figure"):
            return None
        import io
        buf = io.BytesIO()
        obj.savefig(buf, format="png")
        return buf.getvalue()

    def bundle(obj):
        data, meta = {}, {}
        f = method(obj, "_repr_mimebundle_")
        if f is not None:
            try:
                r = f(include=None, exclude=None)
            except TypeError:
                r = f()
            if isinstance(r, tuple) and len(r) == 2:
                r, meta = r[0], dict(r[1] or {})
            if isinstance(r, dict):
                data.update(r)
        for mime, name in REPRS:
            if mime in data:
                continue
            f = method(obj, name)
            if f is None:
                continue
            v = f()
            if isinstance(v, tuple) and len(v) == 2:
                v, meta[mime] = v
            if v is not None:
                data[mime] = v
        if "image/png" not in data:
            png = figure_png(obj)
            if png is not None:
                data["image/png"] = png
        if "text/plain" not in data:
            data["text/plain"] = repr(obj)
        return parts(data), meta

    def parts(data):
        # Every part as the engine takes it: a string (images in base64, JSON encoded).
        out = {}
        for mime, v in data.items():
            if mime in ("image/png", "image/jpeg"):
                if isinstance(v, (bytes, bytearray, memoryview)):
                    v = base64.b64encode(bytes(v)).decode("ascii")
                elif not isinstance(v, str):
                    continue
            elif mime == "application/json" or mime.endswith("+json"):
                v = v if isinstance(v, str) else _json.dumps(v, default=str)
            elif not isinstance(v, str):
                v = v.decode("utf-8", "replace") if isinstance(v, (bytes, bytearray)) else str(v)
            out[mime] = v
        return out

    def emit(kind, data, meta):
        # The control code checks and bounds what arrives; the engine checks it again.
        import js
        js.sandchatDisplay(kind, _json.dumps({"data": data, "metadata": meta}, default=str))

    def display(*objs, raw=False, metadata=None, **kwargs):
        for obj in objs:
            if raw and isinstance(obj, dict):
                data, meta = parts(obj), dict(metadata or {})
            else:
                data, meta = bundle(obj)
                if metadata:
                    meta.update(metadata)
            emit("display", data, meta)

    def show_result(value):
        # A trailing expression shows like Jupyter's Out[]: as a display item when it has
        # more than text. Its text, as the result, is its bundle's text/plain (its repr
        # unless the bundle says otherwise).
        try:
            data, meta = bundle(value)
        except BaseException:
            return repr(value)
        if set(data) - {"text/plain"}:
            emit("result", data, meta)
        return data.get("text/plain") or repr(value)

    def rich_module():
        # IPython.display's common classes, for code written for notebooks.
        m = types.ModuleType("IPython.display")
        class _Rich:
            mime = "text/plain"
            def __init__(self, data=None, url=None, filename=None, metadata=None, **kw):
                if filename is not None:
                    with open(filename, "rb" if self.binary else "r") as fh:
                        data = fh.read()
                self.data, self.metadata = data, metadata
            binary = False
            def _repr_mimebundle_(self, include=None, exclude=None):
                return {self.mime: self.data, "text/plain": f"<{type(self).__name__} object>"}
        def rich(name, mime, binary=False):
            return type(name, (_Rich,), {"mime": mime, "binary": binary})
        m.HTML = rich("HTML", "text/html")
        m.Markdown = rich("Markdown", "text/markdown")
        m.SVG = rich("SVG", "image/svg+xml")
        m.JSON = rich("JSON", "application/json")
        m.Latex = rich("Latex", "text/latex")
        class Image(_Rich):
            binary = True
            def __init__(self, data=None, url=None, filename=None, format="png", width=None, height=None, **kw):
                super().__init__(data, url, filename)
                self.mime = "image/jpeg" if str(format).lower() in ("jpg", "jpeg") else "image/png"
                self.width, self.height = width, height
            def _repr_mimebundle_(self, include=None, exclude=None):
                # The size to draw it at, as IPython's metadata says it.
                size = {k: v for k, v in (("width", self.width), ("height", self.height)) if v is not None}
                return super()._repr_mimebundle_(include, exclude), ({self.mime: size} if size else {})
        m.Image = Image
        m.display = display
        m.clear_output = lambda *a, **k: None
        pkg = types.ModuleType("IPython")
        pkg.display = m
        pkg.__path__ = []
        sys.modules.setdefault("IPython", pkg)
        sys.modules.setdefault("IPython.display", m)

    rich_module()

    def patch_pyplot(plt):
        # A figure the code saved as a PNG in the working directory, and has not changed
        # since, is shown as that file: plt.savefig("x.png") then plt.show() is one image.
        Figure = getattr(plt, "Figure", None)
        if Figure is not None and not getattr(Figure.savefig, "_sandchat", False):
            savefig = Figure.savefig
            def saving(self, fname, *args, **kwargs):
                r = savefig(self, fname, *args, **kwargs)
                try:
                    p = os.path.abspath(os.fspath(fname))
                except TypeError:  # a file object
                    return r
                fmt = kwargs.get("format") or os.path.splitext(p)[1][1:]
                if str(fmt).lower() == "png" and p.startswith("/home/pyodide/"):
                    self._sandchat_png = p
                return r
            saving._sandchat = True
            Figure.savefig = saving

        def show(*args, **kwargs):
            for num in plt.get_fignums():
                fig = plt.figure(num)
                saved = getattr(fig, "_sandchat_png", None)
                if saved and os.path.isfile(saved) and not getattr(fig, "stale", False):
                    name = os.path.relpath(saved, "/home/pyodide")
                else:
                    i = 1
                    while os.path.exists(f"/home/pyodide/figure-{i}.png"):
                        i += 1
                    name = f"figure-{i}.png"
                    fig.savefig(f"/home/pyodide/{name}", format="png")
                with open(f"/home/pyodide/{name}", "rb") as fh:
                    png = fh.read()
                emit("display", {"image/png": base64.b64encode(png).decode("ascii"),
                                 "text/plain": repr(fig)}, {"filename": name})
            plt.close("all")
        plt.show = show

    class PyplotHook(importlib.abc.MetaPathFinder):
        # plt.show() has no display here: it saves open figures as PNG artifacts instead.
        def find_spec(self, name, path, target=None):
            if name != "matplotlib.pyplot":
                return None
            sys.meta_path.remove(self)
            try:
                spec = importlib.util.find_spec(name)
            finally:
                sys.meta_path.insert(0, self)
            if spec is None or spec.loader is None:
                return spec
            loader = spec.loader
            class Loader(importlib.abc.Loader):
                def create_module(self, spec):
                    return loader.create_module(spec)
                def exec_module(self, module):
                    loader.exec_module(module)
                    patch_pyplot(module)
            spec.loader = Loader()
            return spec

    sys.meta_path.insert(0, PyplotHook())

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

    # micropip: sandchat's own, shadowing Pyodide's. The session has no network: the
    # engine resolves, fetches and verifies wheels and the Worker installs them.
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

    from pyodide.ffi import can_run_sync, run_sync

    def said(e):
        e._sandchat_said = True
        return e

    class DistributionFinder(importlib.abc.MetaPathFinder):
        # Last on sys.meta_path: asked only when no other finder has the module. If a
        # package of the Pyodide distribution provides it, the engine serves it (within
        # the run's package bounds) and the Worker loads it, so importlib.import_module
        # and __import__ load packages as import statements do.
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

    builtins.display = display
    # The top-level modules this driver provides: Pyodide's own packages of these names
    # are never loaded for them (worker.ts, forgetProvided), nor fetched (pkgs.Provided).
    _m.provided = ("micropip", "IPython")
    _m.display = display
    _m.run = run
    _m.run_async = run_async
    _m.reseed = reseed
    _m.compiled = compiled
    _m.forget_listings = forget_listings

_install()
del _install, _m
