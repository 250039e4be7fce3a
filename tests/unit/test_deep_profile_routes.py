"""The deep profile's route: GET says whether the next prompt is to be deep-profiled, POST
{armed} asks for it or takes the request back; anything else is a 400."""

import importlib

from tests.unit.test_routes import PACK, client_and_store  # noqa: F401 - the fixture


async def test_arm_and_disarm_through_the_route(client_and_store):  # noqa: F811
    client, _, _ = client_and_store
    control = importlib.import_module(f"{PACK}.monitors.deep_profile.control")
    control.get_controller().switch.set(False)
    state = await (await client.get("/pipeline_monitor/deep_profile")).json()
    assert state == {"armed": False, "active_prompt_id": None, "last_prompt_id": state["last_prompt_id"]}
    response = await client.post("/pipeline_monitor/deep_profile", json={"armed": True})
    assert response.status == 200 and (await response.json())["armed"] is True
    assert control.get_controller().switch.armed
    response = await client.post("/pipeline_monitor/deep_profile", json={"armed": False})
    assert (await response.json())["armed"] is False and not control.get_controller().switch.armed
    for body in ({"armed": "yes"}, {}, [1]):
        assert (await client.post("/pipeline_monitor/deep_profile", json=body)).status == 400
    assert (await client.post("/pipeline_monitor/deep_profile", data="x")).status == 400
    assert not control.get_controller().switch.armed
