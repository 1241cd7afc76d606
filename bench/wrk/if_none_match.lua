-- GETs with If-None-Match set to the entity tag in the environment variable ETAG, so a client
-- that already holds the document is answered 304 Not Modified.
wrk.headers["If-None-Match"] = os.getenv("ETAG")
