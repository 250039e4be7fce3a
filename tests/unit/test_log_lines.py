"""Log patterns of the server tests hold on ComfyUI 0.33's coloured console lines."""

import logging
import re

from tests.log_lines import strip_colours


class ColouredLikeComfyUI(logging.Formatter):
    """ComfyUI 0.33's app/logger.py ColoredFormatter: a bold coloured level tag, some lines coloured."""

    def format(self, record):
        tag = f"\033[1m\033[33m[{record.levelname}]\033[0m "
        message = super().format(record)
        return f"{tag}\033[32m{message}\033[0m" if getattr(record, "color", None) else tag + message


def line(message, **extra):
    record = logging.LogRecord("root", logging.WARNING, __file__, 1, message, None, None)
    record.__dict__.update(extra)
    return ColouredLikeComfyUI("%(message)s").format(record)


def test_the_patterns_of_the_server_tests_match_coloured_lines():
    log = "\n".join(
        (
            line("lora key not loaded: lora_unet_x.alpha"),
            line("   0.1 seconds: /srv/ComfyUI/custom_nodes/pipeline-monitor", color="green"),
            line("Starting server"),
        )
    )
    plain = strip_colours(log)
    assert re.findall(r"lora key not loaded: (\S+)", plain) == ["lora_unet_x.alpha"]
    import_line = r"seconds.*: .*custom_nodes[/\\]pipeline-monitor$"
    startup = plain.split("Starting server", 1)[0]
    assert [x for x in startup.splitlines() if re.search(import_line, x)]
    assert not [x for x in log.splitlines() if re.search(import_line, x)]  # what a coloured line does
    assert strip_colours("plain [INFO] text") == "plain [INFO] text"
