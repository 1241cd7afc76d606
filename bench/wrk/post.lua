-- POSTs the JSON-RPC body in the environment variable BODY (default: a SendMessage) with the
-- Authorization value in AUTH, if any, and the Accept value in ACCEPT, if any.
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["A2A-Version"] = "1.0"
local auth = os.getenv("AUTH")
if auth and auth ~= "" then
  wrk.headers["Authorization"] = auth
end
local accept = os.getenv("ACCEPT")
if accept and accept ~= "" then
  wrk.headers["Accept"] = accept
end
wrk.body = os.getenv("BODY") or
  '{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"m1","role":"ROLE_USER","parts":[{"text":"What are your opening hours on public holidays?"}]}}}'
