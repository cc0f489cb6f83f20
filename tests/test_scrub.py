"""The one scrubber (issue 12, item 1): every secret replaced, in text, bytes, data and logs."""

import logging

from amacs_server.scrub import LogScrubber, Scrubber

KEY, TOKEN = "sk-ant-api03-abcdefghijklmnop", "0123456789abcdef0123456789abcdef"


def scrubber() -> Scrubber:
    return Scrubber({"ANTHROPIC_API_KEY": KEY, "AMACS_TOKEN": TOKEN, "OPENAI_API_KEY": None, "SHORT": "k"})


def test_text_bytes_and_data_lose_every_secret():
    s = scrubber()
    assert s.text(f"a {KEY} b {TOKEN}") == "a [redacted ANTHROPIC_API_KEY] b [redacted AMACS_TOKEN]"
    assert s.data(f'(return 1 "{KEY}")'.encode()) == b'(return 1 "[redacted ANTHROPIC_API_KEY]")'
    assert s.value({"r": [KEY, (TOKEN, 3)], "n": 1}) == {"r": ["[redacted ANTHROPIC_API_KEY]",
                                                               ("[redacted AMACS_TOKEN]", 3)], "n": 1}
    assert s.text("k is a letter") == "k is a letter"  # too short to be a secret: never redacted


def test_log_records_and_their_tracebacks_are_scrubbed(caplog):
    log = logging.getLogger("amacs.test-scrub")
    caplog.handler.addFilter(LogScrubber(scrubber()))
    with caplog.at_level(logging.INFO, logger="amacs.test-scrub"):
        log.info("calling with %s", KEY)
        try:
            raise ValueError(f"bad header x-api-key: {KEY}")
        except ValueError:
            log.exception("failed")
    assert KEY not in caplog.text and "[redacted ANTHROPIC_API_KEY]" in caplog.text


def test_what_mcp_json_gives_is_learnt_and_replaced_when_read_again():
    s = scrubber()
    s.learn("mcp.json", [("mcp.json DB", "postgres://app:pw1@db/app"), ("mcp.json password", ":pw1@"),
                         ("mcp.json W", 'with "quote" in-it')])
    assert s.text("url postgres://app:pw1@db/app; again app:pw1@other") == \
        "url [redacted mcp.json DB]; again app[redacted mcp.json password]other"
    assert s.data(b'(x "with \\"quote\\" in-it")') == b'(x "[redacted mcp.json W]")'  # as elisp prints it
    assert s.text('{"v": "with \\"quote\\" in-it"}') == '{"v": "[redacted mcp.json W]"}'  # as JSON writes it
    s.learn("mcp.json", [])
    assert "pw1" in s.text("app:pw1@db") and KEY not in s.text(KEY)  # the file's old secrets go; the keys stay


def test_a_file_is_scrubbed_a_chunk_at_a_time_even_where_a_secret_straddles_two(tmp_path):
    s = scrubber()
    path = tmp_path / "big.json"
    text = ("." * 37 + KEY) * 50 + TOKEN + "tail"
    path.write_text(text)
    path.chmod(0o600)
    s.file(path, chunk=64)  # smaller than the text between secrets: most of them straddle a chunk
    assert path.read_text() == text.replace(KEY, "[redacted ANTHROPIC_API_KEY]").replace(TOKEN, "[redacted AMACS_TOKEN]")
    assert path.stat().st_mode & 0o777 == 0o600
