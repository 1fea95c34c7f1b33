"""`/ui/`: the page is served by agentos with everything it loads; its data comes from the gated API."""

import re

import pytest

from tests.support.conf import with_conf

pytestmark = pytest.mark.django_db


def test_the_page_loads_nothing_from_elsewhere(client):
    response = client.get("/ui/")

    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/html")
    page = response.content.decode()
    assert "<title>agentos · live timeline</title>" in page
    assert re.findall(r"""(?:src|href)=["']?(?:https?:)?//""", page) == []
    assert "<link" not in page and "<script src" not in page
    assert client.get("/ui").status_code == 200


@with_conf("security", security_key="s3cret")
def test_under_a_security_key_the_page_asks_for_it_and_the_data_stays_gated(client):
    page = client.get("/ui/").content.decode()

    assert 'id="token"' in page and "Authorization: `Bearer ${token}`" in page
    assert client.get("/queue/stats").status_code == 401
    assert client.get("/config").status_code == 401
