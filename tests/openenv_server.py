"""A real OpenEnv server for the tests, built with `openenv-core`'s `create_app` (run as a script:
`python tests/openenv_server.py PORT`), and the helpers that start and stop it.

The environment: "say the word". `reset(target=..)` answers `Say <target>.`; each step rewards 1.0 when the
message contains the target (the episode ends there) and 0.0 otherwise, until `turns` steps. Reset arguments
slow it down for the timeout tests (`reset_delay_s`, `first_reset_delay_s` for the first reset of a `key`,
`step_delay_s`); `GET /test/resets` counts the resets per `key` (across sessions: one process).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import httpx

from bench.common import free_port

RESETS: Counter[str] = Counter()


def build_app():
    from openenv.core.env_server.http_server import create_app
    from openenv.core.env_server.interfaces import Environment
    from openenv.core.env_server.types import Action, Observation, State
    from pydantic import Field

    class SayAction(Action):
        message: str = Field(..., description="What the agent says")

    class SayObservation(Observation):
        prompt: str = Field(default="", description="What the environment asks for")

    class SayEnvironment(Environment):
        SUPPORTS_CONCURRENT_SESSIONS = True

        def __init__(self) -> None:
            super().__init__()
            self._state = State(step_count=0)
            self.target, self.turns, self.step_delay_s = "yes", 2, 0.0

        def reset(self, seed=None, episode_id=None, target: str = "yes", turns: int = 2, key: str = "",
                  reset_delay_s: float = 0.0, first_reset_delay_s: float = 0.0, step_delay_s: float = 0.0,
                  **kwargs) -> SayObservation:
            RESETS[key] += 1
            time.sleep(reset_delay_s + (first_reset_delay_s if RESETS[key] == 1 else 0.0))
            self._state = State(step_count=0)
            self.target, self.turns, self.step_delay_s = target, turns, step_delay_s
            return SayObservation(prompt=f"Say {target}.", done=False, reward=None)

        def step(self, action: SayAction, timeout_s=None, **kwargs) -> SayObservation:
            time.sleep(self.step_delay_s)
            self._state.step_count += 1
            hit = self.target in action.message
            done = hit or self._state.step_count >= self.turns
            return SayObservation(prompt="" if done else f"No. Say {self.target}.", done=done,
                                  reward=1.0 if hit else 0.0)

        @property
        def state(self) -> State:
            return self._state

    app = create_app(SayEnvironment, SayAction, SayObservation, env_name="say", max_concurrent_envs=64)

    @app.get("/test/resets")
    def resets() -> dict[str, int]:
        return dict(RESETS)

    return app


class ServerProcess:
    """The server in a subprocess on a free loopback port (killable like a crashed server)."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "ENABLE_WEB_INTERFACE": "false"}
        self.log = tempfile.NamedTemporaryFile(prefix="openenv-server-", suffix=".log")  # noqa: SIM115
        self.proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), str(self.port)], env=env,
                                     stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the OpenEnv server exited: {Path(self.log.name).read_text()[-2000:]}")
            try:
                if httpx.get(f"{self.url}/health", timeout=2, trust_env=False).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        self.kill()
        raise RuntimeError("the OpenEnv server did not start within 120 s")

    def resets(self) -> dict[str, int]:
        return httpx.get(f"{self.url}/test/resets", timeout=5, trust_env=False).json()

    def kill(self) -> None:
        """SIGKILL, as a crash would: sessions drop without a close."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)
        self.log.close()


if __name__ == "__main__":
    import uvicorn

    uvicorn.run(build_app(), host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
