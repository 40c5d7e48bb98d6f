"""One LiteLLM call, run by the e2e tests in LiteLLM's own virtual env
(scripts/install-deps.sh makes it; conftest.litellm_call runs this file
there), since LiteLLM's pins conflict with the system Python's packages.

    python litellm_call.py '{"function": "responses" | "completion", "kwargs": {...}}'

Prints the result as JSON (the response object's model_dump), or, when the
call raises, {"litellm_error": {"type": ..., "message": ...}} and exits 1."""

import json
import os
import sys

# LiteLLM fetches its model price list from GitHub on import otherwise.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import litellm  # noqa: E402


def main():
    call = json.loads(sys.argv[1])
    function = {"responses": litellm.responses, "completion": litellm.completion}[call["function"]]
    try:
        result = function(**call["kwargs"])
    except Exception as e:  # reported to the test, which fails with it
        print(json.dumps({"litellm_error": {"type": type(e).__name__, "message": str(e)}}))
        sys.exit(1)
    print(json.dumps(result.model_dump(mode="json")))


if __name__ == "__main__":
    main()
