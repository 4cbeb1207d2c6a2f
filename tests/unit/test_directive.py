"""The opt-in directive: valid forms are read, every broken form is reported, nothing raises."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from resurgo.contracts import Mode
from resurgo.policy.directive import parse_directive


class TestParseDirective:
    def test_no_comment_is_not_opted_in(self) -> None:
        assert not parse_directive(None).opted_in
        assert not parse_directive("").opted_in
        assert not parse_directive("just a note about llama").opted_in

    def test_minimal_directive_defaults_to_observe(self) -> None:
        parsed = parse_directive('{"resurgo":{}}')
        assert parsed.opted_in and parsed.directive is not None
        assert parsed.directive.mode == Mode.OBSERVE
        assert parsed.problems == []

    def test_nvidia_recovery_alias(self) -> None:
        parsed = parse_directive('{"nvidia-recovery":{"environment":"prod","mode":"action"}}')
        assert parsed.directive is not None
        assert parsed.directive.mode == Mode.ACTION
        assert parsed.directive.environment == "prod"

    def test_all_fields(self) -> None:
        parsed = parse_directive(
            '{"resurgo":{"mode":"action","max_attempts":3,"hang_timeout":120,'
            '"progress_pattern":"it (\\\\d+)","approval":"required","approval_timeout":60,'
            '"drain":true,"straggler":{"ratio":2.0,"window":5},"policy":"strict"}}'
        )
        assert parsed.problems == []
        d = parsed.directive
        assert d is not None and d.max_attempts == 3 and d.hang_timeout == 120
        assert d.straggler is not None and d.straggler.ratio == 2.0
        assert d.approval == "required" and d.drain and d.policy == "strict"

    def test_malformed_json_is_reported_not_ignored(self) -> None:
        parsed = parse_directive('{"resurgo": {"mode": "action"')
        assert parsed.opted_in and parsed.directive is None
        assert "not valid JSON" in parsed.problems[0]

    def test_bad_values_leave_the_job_alone(self) -> None:
        parsed = parse_directive('{"resurgo":{"mode":"yolo","max_attempts":-1}}')
        assert parsed.opted_in and parsed.directive is None
        text = " ".join(parsed.problems)
        assert "mode" in text and "max_attempts" in text

    def test_unknown_fields_are_reported_but_directive_kept(self) -> None:
        parsed = parse_directive('{"resurgo":{"mode":"observe","colour":"blue"}}')
        assert parsed.directive is not None
        assert parsed.problems == ["unknown fields ignored: colour"]

    def test_progress_pattern_needs_a_group(self) -> None:
        parsed = parse_directive('{"resurgo":{"progress_pattern":"step \\\\d+"}}')
        assert parsed.directive is None
        assert "capturing group" in parsed.problems[0]
        parsed = parse_directive('{"resurgo":{"progress_pattern":"step (\\\\d+"}}')
        assert parsed.directive is None and "regular expression" in parsed.problems[0]

    def test_directive_key_must_hold_an_object(self) -> None:
        parsed = parse_directive('{"resurgo":"action"}')
        assert parsed.opted_in and parsed.directive is None

    def test_other_json_comments_are_not_opt_ins(self) -> None:
        assert not parse_directive('{"owner":"team-a"}').opted_in

    @given(st.text(max_size=300))
    def test_never_raises_on_arbitrary_text(self, text: str) -> None:
        parse_directive(text)
        parse_directive('{"resurgo":' + text)

    @given(
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.text(max_size=10),
            lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=8), c, max_size=3),
            max_leaves=10,
        )
    )
    def test_never_raises_on_arbitrary_json(self, body: object) -> None:
        import json

        parsed = parse_directive(json.dumps({"resurgo": body}))
        assert parsed.opted_in
        assert parsed.directive is not None or parsed.problems
