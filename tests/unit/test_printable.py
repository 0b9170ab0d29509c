"""Text from hosts never drives the terminal: control characters are shown, not obeyed."""

import io

from bot.foundation.printable import PrintableStream, printable


def test_escape_sequences_are_shown_as_text_newlines_and_tabs_kept():
    evil = "\x1b[31mred\x1b[0m\x1b]0;pwned\x07 \x9b2J\r\x00\x7f ok\tcol\nnext"
    assert printable(evil) == "\\x1b[31mred\\x1b[0m\\x1b]0;pwned\\x07 \\x9b2J\\x0d\\x00\\x7f ok\tcol\nnext"
    assert printable("GPU 3: 81,920 MiB — ünïcode ✔") == "GPU 3: 81,920 MiB — ünïcode ✔"


def test_the_stream_escapes_what_is_written_and_is_otherwise_the_stream():
    raw = io.StringIO()
    out = PrintableStream(raw)
    print("vllm[42]: \x1b[2Jcleared?", file=out)  # type: ignore[arg-type]
    out.writelines(["a\x1b", "b\n"])
    assert raw.getvalue() == "vllm[42]: \\x1b[2Jcleared?\na\\x1bb\n"
    assert out.isatty() is False and out.getvalue() == raw.getvalue()
