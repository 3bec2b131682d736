# The display steps of the driver (driver.py): Jupyter's MIME bundles, IPython.display's
# common classes, and matplotlib figures shown as PNG artifacts. The Worker runs this
# file first, in the same namespace; driver.py's _install calls these steps and deletes
# their names.
import sys, types, os, importlib.abc, importlib.util


def _rich_display():
    # display: Jupyter's MIME bundles, handed to the Worker (worker/output.ts,
    # sandchatDisplay). Returns display, show_result (a cell's trailing value), emit,
    # clear_output and the DisplayHandle class.
    import base64, json as _json, uuid

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

    def emit(kind, data, meta, display_id=None, **extra):
        # The control code checks and bounds what arrives; the engine checks it again.
        # What was printed goes first: the item comes after it, as it was written.
        import js
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        item = {"data": data, "metadata": meta, **extra}
        if display_id is not None:
            item["transient"] = {"display_id": str(display_id)}
        js.sandchatDisplay(kind, _json.dumps(item, default=str))

    class DisplayHandle:
        # What display(…, display_id=…) returns: its item can be shown again or updated
        # in place, as IPython's.
        def __init__(self, display_id=None):
            self.display_id = uuid.uuid4().hex if display_id is None else str(display_id)
        def __repr__(self):
            return f"<DisplayHandle display_id={self.display_id}>"
        def display(self, obj, **kwargs):
            display(obj, display_id=self.display_id, **kwargs)
        def update(self, obj, **kwargs):
            display(obj, display_id=self.display_id, update=True, **kwargs)

    def clear_output(wait=False):
        # What the cell showed so far goes: at once, or (wait) when something new comes,
        # so a progress line redrawn in a loop does not flicker. Its record keeps only
        # what comes after.
        emit("clear", {}, {}, wait=bool(wait))

    def display(*objs, raw=False, metadata=None, display_id=None, update=False, clear=False, transient=None, **kwargs):
        if display_id is True:
            display_id = uuid.uuid4().hex
        if display_id is None and isinstance(transient, dict):
            display_id = transient.get("display_id")
        if clear:
            clear_output(wait=True)
        for obj in objs:
            if raw and isinstance(obj, dict):
                data, meta = parts(obj), dict(metadata or {})
            else:
                data, meta = bundle(obj)
                if metadata:
                    meta.update(metadata)
            emit("update" if update and display_id is not None else "display", data, meta, display_id)
        if display_id is not None and not update:
            return DisplayHandle(display_id)

    def update_display(obj, *, display_id, **kwargs):
        display(obj, display_id=display_id, update=True, **kwargs)

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

    return display, show_result, emit, clear_output, DisplayHandle, update_display


def _ipython_display(display, clear_output, DisplayHandle, update_display):
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
    class Math(_Rich):
        # An equation, drawn as display math (IPython's $\displaystyle …$).
        mime = "text/latex"
        def _repr_mimebundle_(self, include=None, exclude=None):
            tex = str(self.data or "").strip().strip("$").strip()
            return {"text/latex": f"$\\displaystyle {tex}$", "text/plain": "<IPython.core.display.Math object>"}
    m.Math = Math
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
    m.clear_output = clear_output
    m.DisplayHandle = DisplayHandle
    m.update_display = update_display
    pkg = types.ModuleType("IPython")
    pkg.display = m
    pkg.__path__ = []
    sys.modules.setdefault("IPython", pkg)
    sys.modules.setdefault("IPython.display", m)


def _pyplot_figures(emit):
    # plt.show() has no display here: it saves open figures as PNG artifacts instead,
    # patched in as matplotlib.pyplot is first imported.
    import base64

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
