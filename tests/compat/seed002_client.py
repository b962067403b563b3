"""A stand-in for seed 002's SDK MemoryClient (sdk/02-MEMORY-SDK.md, not in the seed): the calls
its service document shows, made the way that document makes them — the paths under
`/v1/memory/`, the bodies as written there, the token as `Authorization: Bearer`, no If-Match,
no MemoryHub-specific header. The only configuration is the service's base URL.

Method names are the ones the seed's tests call (store_task_context, get_task_by_subtask,
create_plan, list_plans); the rest follow the same pattern. Lists unwrap `plans` / `sessions`
as the seed's `plans = await memory.list_plans(...); plans[0]["plan_id"]` requires.
"""

from __future__ import annotations

from typing import Any

import httpx


class SeedMemoryError(Exception):
    def __init__(self, response: httpx.Response) -> None:
        super().__init__(f"{response.status_code}: {response.text}")
        self.status_code = response.status_code
        self.body = response.json() if response.content else None


class SeedMemoryClient:
    def __init__(self, base_url: str, token: str, *, user_id: str | None = None) -> None:
        headers = {"Authorization": f"Bearer {token}"}
        if user_id is not None:
            headers["X-User-Id"] = user_id
        self._http = httpx.AsyncClient(base_url=base_url, headers=headers, timeout=30)

    async def __aenter__(self) -> SeedMemoryClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._http.aclose()

    async def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        response = await self._http.request(method, f"/v1/memory{path}", **kwargs)
        if response.status_code >= 400:
            raise SeedMemoryError(response)
        return response.json() if response.content else None

    # --- task context (RF-ARCH-008) ---------------------------------------------------------

    async def store_task_context(self, **context: Any) -> Any:
        return await self._call("POST", "/task-context", json=context)

    async def get_task_context(self, task_id: str) -> Any:
        return await self._call("GET", f"/task-context/{task_id}")

    async def update_task_context(self, task_id: str, **changes: Any) -> Any:
        return await self._call("PUT", f"/task-context/{task_id}", json=changes)

    async def get_task_by_subtask(self, subtask_id: str) -> Any:
        return await self._call("GET", f"/task-context/by-subtask/{subtask_id}")

    async def delete_task_context(self, task_id: str) -> Any:
        return await self._call("DELETE", f"/task-context/{task_id}")

    # --- plans (RF-ARCH-009) ----------------------------------------------------------------

    async def create_plan(self, **plan: Any) -> Any:
        return await self._call("POST", "/plans", json=plan)

    async def list_plans(self, status: str | None = None, limit: int | None = None) -> Any:
        params = {k: v for k, v in {"status": status, "limit": limit}.items() if v is not None}
        return (await self._call("GET", "/plans", params=params))["plans"]

    async def list_plans_raw(self, **params: Any) -> Any:
        return await self._call("GET", "/plans", params=params)

    async def get_plan(self, plan_id: str) -> Any:
        return await self._call("GET", f"/plans/{plan_id}")

    async def update_plan(self, plan_id: str, **changes: Any) -> Any:
        return await self._call("PUT", f"/plans/{plan_id}", json=changes)

    async def delete_plan(self, plan_id: str) -> Any:
        return await self._call("DELETE", f"/plans/{plan_id}")

    # --- sessions (RF-ARCH-009) -------------------------------------------------------------

    async def create_session(self, **session: Any) -> Any:
        return await self._call("POST", "/sessions", json=session)

    async def list_sessions(self, limit: int | None = None) -> Any:
        params = {"limit": limit} if limit is not None else {}
        return await self._call("GET", "/sessions", params=params)

    async def get_session(self, session_id: str) -> Any:
        return await self._call("GET", f"/sessions/{session_id}")

    async def update_session(self, session_id: str, **changes: Any) -> Any:
        return await self._call("PUT", f"/sessions/{session_id}", json=changes)

    async def delete_session(self, session_id: str) -> Any:
        return await self._call("DELETE", f"/sessions/{session_id}")
