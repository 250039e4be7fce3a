"""Pipeline Monitor: a ComfyUI custom-node pack that shows what each pipeline step costs and does.

Import registers the routes and exposes the extension and web folder; nothing else runs here
(no threads, no device probing, no output). The per-node profile hook is installed when
ComfyUI asks for the extension.
"""

WEB_DIRECTORY = "./web"

try:
    from .nodes.routes import register_with_server

    register_with_server()
except ImportError:  # imported outside ComfyUI (tooling, tests of monitors/)
    pass


async def comfy_entrypoint():
    from .nodes.extension import PipelineMonitorExtension
    from .nodes.profile_hook import install

    install()
    return PipelineMonitorExtension()


__all__ = ["WEB_DIRECTORY", "comfy_entrypoint"]
