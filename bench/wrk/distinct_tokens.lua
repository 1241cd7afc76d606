-- POSTs a SendMessage with a different well-formed (checksum-valid) but unknown peer token on
-- every request, read from the file in TOKENS, so no cached verdict can answer it. The
-- requests are built once, in `init` (after wrk has set the Host header, before the run
-- starts), so that building them in Lua is not part of what the shared cores spend during it:
-- the server is measured, not the load generator.
local requests = {}
function init(args)
  local body = os.getenv("BODY")
  for line in io.lines(os.getenv("TOKENS")) do
    requests[#requests + 1] = wrk.format("POST", nil, {
      ["Content-Type"] = "application/json",
      ["Authorization"] = "Bearer " .. line,
    }, body)
  end
end
local i = 0
request = function()
  i = i % #requests + 1
  return requests[i]
end
