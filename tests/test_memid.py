"""MemId parse/format/validate (memid-active-memory.md, Phase 1; unit test 1)."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from amacs_server.memory.memid import MemId, MemIdError, is_valid

agents = st.from_regex(r"\A[A-Za-z][A-Za-z0-9_-]{0,20}\Z")
brains = st.from_regex(r"\A[a-z][a-z0-9_-]{0,12}\Z")
names = st.from_regex(r"\A[a-z0-9_][a-z0-9_.-]{0,30}\Z")
versions = st.one_of(st.none(), st.integers(1, 10**12))


@given(agents, brains, names, versions)
def test_round_trip(agent, brain, name, version):
    mem_id = MemId(agent, brain, name, version)
    text = mem_id.format()
    assert MemId.parse(text) == mem_id
    assert MemId.parse(text).format() == text


@given(agents, brains, names)
def test_latest_alias_is_no_version(agent, brain, name):
    assert MemId.parse(f"<EOT>{agent}:{brain}:{name}:latest<EOT>") == MemId(agent, brain, name, None)


def test_canonical_example_from_the_spec():
    m = MemId.parse("<EOT>Agent:primary:task_plan:12<EOT>")
    assert (m.agent, m.brain, m.name, m.version, m.base) == ("Agent", "primary", "task_plan", 12, "Agent:primary:task_plan")


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("Agent:primary:x:1", "must start and end with <EOT>"),
        ("<EOT><EOT>", "must start and end with <EOT>"),
        ("<EOT>a:primary<EOT>", "got 2 field(s)"),
        ("<EOT>a:primary:x:1:2<EOT>", "got 5 field(s)"),
        ("<EOT>a:primary:x:0<EOT>", "positive integer or 'latest', got '0'"),
        ("<EOT>a:primary:x:01<EOT>", "got '01'"),
        ("<EOT>a:primary:x:-3<EOT>", "got '-3'"),
        ("<EOT>a:primary:x:v2<EOT>", "got 'v2'"),
        ("<EOT>:primary:x<EOT>", "the agent is empty"),
        ("<EOT>a::x<EOT>", "the brain is empty"),
        ("<EOT>a:primary:<EOT>", "the name is empty"),
        ("<EOT>9a:primary:x<EOT>", "the agent '9a' must start with [A-Za-z]"),
        ("<EOT>a:Primary:x<EOT>", "the brain 'Primary' must start with [a-z]"),
        ("<EOT>a:primary:my note<EOT>", "has ' ' at 2"),
        ("<EOT>a:primary:Note<EOT>", "must start with [a-z0-9_], not 'N'"),
    ],
)
def test_invalid_strings_give_a_precise_error(text, reason):
    with pytest.raises(MemIdError) as err:
        MemId.parse(text)
    assert reason in str(err.value)
    assert not is_valid(text)


@given(agents, brains, names, versions)
def test_a_memid_given_without_its_delimiters_is_the_same(agent, brain, name, version):
    """A person reads an address without its <EOT>s (the agent is shown them) and may type it so."""
    mem_id = MemId(agent, brain, name, version)
    assert MemId.given(mem_id.format()) == mem_id
    assert MemId.given(mem_id.format().removeprefix("<EOT>").removesuffix("<EOT>")) == mem_id


@pytest.mark.parametrize(
    ("text", "reason"),
    [("groceries", "MemId 'groceries' needs AGENT:BRAIN:NAME"),
     ("<EOT>a:primary:x", "must start and end with <EOT>"),
     ("a:primary:Note", "MemId 'a:primary:Note': the name 'Note' must start with")],
)
def test_a_memid_given_wrongly_is_refused_in_the_words_it_was_given(text, reason):
    with pytest.raises(MemIdError) as err:
        MemId.given(text)
    assert reason in str(err.value)


@given(st.text(max_size=40))
def test_arbitrary_text_parses_or_raises_memid_error(text):
    try:
        m = MemId.parse(text)
    except MemIdError:
        return
    assert MemId.parse(m.format()) == m


def test_non_string_refused():
    with pytest.raises(MemIdError, match="a MemId is a string"):
        MemId.parse(42)
