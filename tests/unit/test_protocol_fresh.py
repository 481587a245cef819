"""The committed generated codecs must match a fresh run of the generator on Kafka's specs."""
import pytest

from pybroker.protocol import generate

SPECS = generate.default_specs_dir()
COMMITTED = generate.PACKAGE_DIR


def _need_specs():
    if not SPECS.is_dir():
        pytest.skip(f"Kafka message specs not found at {SPECS}: the freshness check needs "
                    "shared/ beside the repository")


def test_generated_files_are_fresh(tmp_path):
    _need_specs()
    assert generate.main(["--specs", str(SPECS), "--out", str(tmp_path)]) == 0
    fresh = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*.py"))
    committed = sorted(p.relative_to(COMMITTED)
                       for p in [COMMITTED / "errors.py", *(COMMITTED / "messages").glob("*.py")])
    assert fresh == committed, "generated file set differs: run python -m pybroker.protocol.generate"
    stale = [str(rel) for rel in fresh
             if (tmp_path / rel).read_bytes() != (COMMITTED / rel).read_bytes()]
    assert not stale, f"out of date (run python -m pybroker.protocol.generate): {stale}"


def test_generation_is_deterministic_and_check_mode(tmp_path):
    _need_specs()
    first = generate.generate_all(SPECS)
    second = generate.generate_all(SPECS)
    assert first == second
    assert all(text.startswith(generate.HEADER_LINE + "\n") for text in first.values())
    generate.write_files(first, tmp_path)
    assert generate.main(["--specs", str(SPECS), "--out", str(tmp_path), "--check"]) == 0
    (tmp_path / "messages" / "produce.py").write_text("# tampered\n")
    assert generate.main(["--specs", str(SPECS), "--out", str(tmp_path), "--check"]) == 1


def test_unsupported_feature_fails_loudly(tmp_path):
    _need_specs()
    for p in SPECS.iterdir():
        if p.name in ("ProduceRequest.json", "ProduceResponse.json", "RequestHeader.json",
                      "ResponseHeader.json", "error-codes.tsv"):
            (tmp_path / p.name).write_bytes(p.read_bytes())
    (tmp_path / "ProduceRequest.json").write_text(
        (tmp_path / "ProduceRequest.json").read_text().replace('"type": "int16"',
                                                             '"type": "int128"', 1))
    with pytest.raises(generate.SpecError, match="int128"):
        generate.generate_all(tmp_path)


def test_missing_specs_dir_is_reported(tmp_path, capsys):
    assert generate.main(["--specs", str(tmp_path / "nope"), "--out", str(tmp_path)]) == 2
    assert "not found" in capsys.readouterr().err
