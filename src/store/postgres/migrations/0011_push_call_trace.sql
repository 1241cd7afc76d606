-- The call whose task a queued push notification tells of, as a W3C traceparent, so the
-- delivery's span links to it (NULL when that call was not traced).
ALTER TABLE push_deliveries ADD COLUMN call_trace TEXT;
