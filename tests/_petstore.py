"""A small in-memory pet store that answers the vendored Swagger Petstore document
(tests/fixtures/petstore/openapi.yaml) under /api/v3, and serves that document at
/api/v3/openapi.yaml. A plain Starlette app (not FastAPI): the document is the
upstream's, written by hand, not generated from this code.

    python tests/_petstore.py PORT      # serve on 127.0.0.1:PORT until stopped

What it checks, so the tests see a real API's answers: `deletePet` and `getInventory`
need the header `api_key: special-key` (401 without it), an unknown pet or order is 404
with a JSON message, a pet without `name` is 422.
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Mount, Route

DOCUMENT = Path(__file__).resolve().parent / "fixtures" / "petstore" / "openapi.yaml"
API_KEY = "special-key"
# The document's operationIds, in its order.
OPERATIONS = ["updatePet", "addPet", "findPetsByStatus", "findPetsByTags", "getPetById", "updatePetWithForm",
              "deletePet", "uploadFile", "getInventory", "placeOrder", "getOrderById", "deleteOrder", "createUser",
              "createUsersWithListInput", "loginUser", "logoutUser", "getUserByName", "updateUser", "deleteUser"]


class Store:
    def __init__(self) -> None:
        self.pets: dict[int, dict[str, Any]] = {
            1: {"id": 1, "name": "Rex", "photoUrls": [], "status": "available",
                "category": {"id": 1, "name": "Dogs"}, "tags": [{"id": 1, "name": "good"}]},
            2: {"id": 2, "name": "Tom", "photoUrls": [], "status": "sold", "tags": [{"id": 2, "name": "cat"}]},
        }
        self.orders: dict[int, dict[str, Any]] = {}
        self.users: dict[str, dict[str, Any]] = {"user1": {"id": 1, "username": "user1", "firstName": "Ada"}}
        self.ids = itertools.count(100)


store = Store()


def _missing(what: str) -> JSONResponse:
    return JSONResponse({"code": 404, "message": f"{what} not found"}, status_code=404)


def _keyed(request: Request) -> bool:
    return request.headers.get("api_key") == API_KEY


async def document(request: Request) -> Response:
    return PlainTextResponse(DOCUMENT.read_text(), media_type="application/yaml")


async def pet(request: Request) -> Response:
    body = await request.json()
    if not isinstance(body, dict) or "name" not in body:
        return JSONResponse({"code": 422, "message": "a pet needs a name"}, status_code=422)
    if request.method == "PUT" and body.get("id") not in store.pets:
        return _missing("Pet")
    body.setdefault("id", next(store.ids))
    body.setdefault("photoUrls", [])
    store.pets[int(body["id"])] = body
    return JSONResponse(body)


async def find_by_status(request: Request) -> Response:
    status = request.query_params.get("status", "available")
    return JSONResponse([p for p in store.pets.values() if p.get("status") == status])


async def find_by_tags(request: Request) -> Response:
    wanted = set(request.query_params.getlist("tags"))
    return JSONResponse([p for p in store.pets.values()
                         if wanted & {t.get("name") for t in p.get("tags", [])}])


async def pet_by_id(request: Request) -> Response:
    pet_id = int(request.path_params["petId"])
    if pet_id not in store.pets:
        return _missing("Pet")
    if request.method == "DELETE":
        if not _keyed(request):
            return JSONResponse({"code": 401, "message": "api_key required"}, status_code=401)
        del store.pets[pet_id]
        return PlainTextResponse("Pet deleted")
    if request.method == "POST":
        for key in ("name", "status"):
            if key in request.query_params:
                store.pets[pet_id][key] = request.query_params[key]
    return JSONResponse(store.pets[pet_id])


async def upload_image(request: Request) -> Response:
    data = await request.body()
    pet_id = int(request.path_params["petId"])
    if pet_id not in store.pets:
        return _missing("Pet")
    note = request.query_params.get("additionalMetadata", "")
    return JSONResponse({"code": 200, "type": "upload", "message": f"{len(data)} bytes {note}".strip()})


async def inventory(request: Request) -> Response:
    if not _keyed(request):
        return JSONResponse({"code": 401, "message": "api_key required"}, status_code=401)
    counts: dict[str, int] = {}
    for p in store.pets.values():
        counts[p.get("status", "available")] = counts.get(p.get("status", "available"), 0) + 1
    return JSONResponse(counts)


async def order(request: Request) -> Response:
    body = await request.json()
    body.setdefault("id", next(store.ids))
    store.orders[int(body["id"])] = body
    return JSONResponse(body)


async def order_by_id(request: Request) -> Response:
    order_id = int(request.path_params["orderId"])
    if order_id not in store.orders:
        return _missing("Order")
    if request.method == "DELETE":
        del store.orders[order_id]
        return PlainTextResponse("order deleted")
    return JSONResponse(store.orders[order_id])


async def user(request: Request) -> Response:
    body = await request.json()
    store.users[body["username"]] = body
    return JSONResponse(body)


async def users_with_list(request: Request) -> Response:
    body = await request.json()
    for u in body:
        store.users[u["username"]] = u
    return JSONResponse(body[-1] if body else {})


async def login(request: Request) -> Response:
    username = request.query_params.get("username", "")
    return JSONResponse(f"logged in user session: {username}")


async def logout(request: Request) -> Response:
    return PlainTextResponse("User logged out")


async def user_by_name(request: Request) -> Response:
    name = request.path_params["username"]
    if name not in store.users:
        return _missing("User")
    if request.method == "PUT":
        store.users[name] = await request.json()
        return PlainTextResponse("updated")
    if request.method == "DELETE":
        del store.users[name]
        return PlainTextResponse("User deleted")
    return JSONResponse(store.users[name])


app = Starlette(routes=[Mount("/api/v3", routes=[
    Route("/openapi.yaml", document),
    Route("/pet", pet, methods=["POST", "PUT"]),
    Route("/pet/findByStatus", find_by_status),
    Route("/pet/findByTags", find_by_tags),
    Route("/pet/{petId:int}", pet_by_id, methods=["GET", "POST", "DELETE"]),
    Route("/pet/{petId:int}/uploadImage", upload_image, methods=["POST"]),
    Route("/store/inventory", inventory),
    Route("/store/order", order, methods=["POST"]),
    Route("/store/order/{orderId:int}", order_by_id, methods=["GET", "DELETE"]),
    Route("/user", user, methods=["POST"]),
    Route("/user/createWithList", users_with_list, methods=["POST"]),
    Route("/user/login", login),
    Route("/user/logout", logout),
    Route("/user/{username}", user_by_name, methods=["GET", "PUT", "DELETE"]),
])])


if __name__ == "__main__":
    import uvicorn

    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
