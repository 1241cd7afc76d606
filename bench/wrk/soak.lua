-- A mix of every kind of request a door sees, one after another on each connection:
-- SendMessage and GetTask with a good token, the public card, a revoked token (401), and a peer
-- over its limit (429). Counts answers by status and prints them at the end.
local good = os.getenv("GOOD")
local revoked = os.getenv("REVOKED")
local limited = os.getenv("LIMITED")
local send = '{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"m1","role":"ROLE_USER","parts":[{"text":"What are your opening hours on public holidays?"}]}}}'
local get = '{"jsonrpc":"2.0","id":2,"method":"GetTask","params":{"id":"0190a0a0-0000-7000-8000-000000000000"}}'
local json = {["Content-Type"] = "application/json", ["A2A-Version"] = "1.0"}
local function with_auth(token)
  local h = {}
  for k, v in pairs(json) do h[k] = v end
  h["Authorization"] = "Bearer " .. token
  return h
end
local requests = {}
local n = 0
statuses = {}
threads = {}

function setup(thread)
  table.insert(threads, thread)
end

function init(args)
  requests = {
    wrk.format("POST", "/a2a/v1", with_auth(good), send),
    wrk.format("POST", "/a2a/v1", with_auth(good), get),
    wrk.format("GET", "/.well-known/agent-card.json", {}, nil),
    wrk.format("POST", "/a2a/v1", with_auth(revoked), get),
    wrk.format("POST", "/a2a/v1", with_auth(limited), get),
  }
end

function request()
  n = n + 1
  return requests[(n % #requests) + 1]
end

function response(status, headers, body)
  statuses[status] = (statuses[status] or 0) + 1
end

function done(summary, latency, requests)
  local total = {}
  for _, thread in ipairs(threads) do
    local counts = thread:get("statuses")
    for status, count in pairs(counts) do
      total[status] = (total[status] or 0) + count
    end
  end
  for status, count in pairs(total) do
    io.write(string.format("status %d: %d\n", status, count))
  end
end
