"""``evobus ui``: a live web page of campaigns, served from the package with no network.

Why a relay, not the browser on nats-server's WebSocket listener: the page's events come
through a small server in ``evobus ui`` (``server.py``) that follows EVO_EVENTS with nats-py
(``feeds.py``) — or, with no bus, or for a campaign the bus does not hold, replays and follows
the run folder's ``events.jsonl`` — and streams the page's view to the browser as Server-Sent
Events. That works

- with the embedded nats-server of ``evobus run``, which has no WebSocket listener (a JS NATS
  client would need one configured on every server, with TLS and an origin list of its own);
- for finished runs whose server is gone (their run folder is all there is);
- with per-role users without handing the browser a NATS password: the relay logs in as the
  read-only ``viewer`` (``EVOBUS_VIEWER_PASSWORD``, else ``NATS_USER``…), and NATS itself is
  never exposed to the page;
- with the run folder beside it, which holds what events do not: a candidate's diagnosis and
  source (the git workspace) and its per-instance scores (``spans.jsonl``).

So the page needs no JS NATS client; it needs a chart library (uPlot, vendored under
``static/vendor`` with its licence), and the server computes every series with the offline
report's functions (``report/series.py``): both show the same numbers. The server listens on
loopback unless ``--host`` says otherwise, and on loopback answers only requests made to a
loopback name (no DNS rebinding). The page has no login: whoever reaches it sees the campaign.
"""

DEFAULT_PORT = 8340
"""``evobus ui --port``'s default (``evobus run --ui`` takes a free port)."""
