"""bench/reproduce.sh --resume: a grid cut off part way (a GPU machine's time limit)
is finished by running the same command again, which runs only what has no JSON yet
and keeps what the first run wrote.

A stand-in `vpod` (a shell script) records its calls, writes the JSON it is asked
for, and can fail on a chosen offline run, which stops the script as a killed run
would.
"""
import json
import os
import stat
import subprocess

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SCRIPT = os.path.join(REPO, "bench", "reproduce.sh")

FAKE_VPOD = r"""#!/usr/bin/env bash
echo "$*" >> "$VPOD_CALLS"
json=""; out=""; prev=""
for a in "$@"; do
  [[ $prev == --json ]] && json=$a
  [[ $prev == --out ]] && out=$a
  prev=$a
done
case "$1" in
  info) exit 0 ;;
  make-model) mkdir -p "$out" && echo '{}' > "$out/config.json"; exit 0 ;;
  bench)
    [[ "$3" == --help ]] && exit 0
    if [[ -n "${FAIL_ON:-}" && "$json" == *"$FAIL_ON"* ]]; then echo "killed" >&2; exit 9; fi
    mode=$(sed -E 's/.*--kv-cache ([a-z]+) --attention ([a-z]+).*/\1+\2/' <<< "$*")
    echo "{\"model_name\": \"tiny\", \"input_len\": 8192, \"pd_ratio\": 50.0, \"mode\": \"$mode\", \"num_requests\": 2, \"makespan_s\": 1.5}" > "$json"
    echo "Makespan (s): 1.5" ;;
esac
"""


def run(tmp_path, *extra, fail_on=None):
    env = dict(os.environ, VPOD_CALLS=str(tmp_path / "calls.txt"), PRESETS="tiny",
               MODES="vattn+pod paged+serial", OFFLINE_PROMPTS="8192", OFFLINE_RATIOS="50 100")
    env.pop("FAIL_ON", None)
    if fail_on:
        env["FAIL_ON"] = fail_on
    return subprocess.run(["bash", SCRIPT, "--build", str(tmp_path / "build"), "--out", str(tmp_path / "out"),
                           "--models", str(tmp_path / "models"), "--docs", str(tmp_path / "docs"),
                           "--sections", "offline", *extra], env=env, capture_output=True, text=True,
                          timeout=120)


def offline_calls(tmp_path):
    lines = (tmp_path / "calls.txt").read_text().splitlines()
    return [line.split("--json ")[1] for line in lines if line.startswith("bench offline --model")]


def test_resume_runs_only_what_has_no_json(tmp_path):
    build = tmp_path / "build"
    build.mkdir()
    (build / "vpod").write_text(FAKE_VPOD)
    (build / "vpod").chmod(stat.S_IRWXU)

    cut = run(tmp_path, fail_on="pd100_vattn-pod")
    assert cut.returncode != 0  # stopped at the third of four runs
    out = tmp_path / "out" / "offline"
    assert sorted(os.listdir(out)) == ["tiny_8192_pd50_paged-serial.json", "tiny_8192_pd50_vattn-pod.json"]
    first = json.loads((tmp_path / "out" / "env.json").read_text())
    (tmp_path / "calls.txt").unlink()

    done = run(tmp_path, "--resume")
    assert done.returncode == 0, done.stderr
    assert [os.path.basename(p) for p in offline_calls(tmp_path)] == [
        "tiny_8192_pd100_vattn-pod.json", "tiny_8192_pd100_paged-serial.json"]
    assert len(os.listdir(out)) == 4
    env = json.loads((tmp_path / "out" / "env.json").read_text())
    assert env["date"] == first["date"] and len(env["resumed"]) == 1
    commands = (tmp_path / "out" / "commands.txt").read_text()
    assert "# --resume at" in commands and commands.count("bench offline") == 5  # 3 + 2
    assert "tiny" in (tmp_path / "docs" / "results.md").read_text()

    (tmp_path / "calls.txt").unlink()
    again = run(tmp_path, "--resume")  # nothing left: no benchmark runs
    assert again.returncode == 0, again.stderr
    assert offline_calls(tmp_path) == []
    # Without --resume the grid runs whole again.
    run(tmp_path)
    assert len(offline_calls(tmp_path)) == 4
