-- POSTs a SendMessage with a different well-formed (checksum-valid) but unknown peer token on
-- every request, read from the file in TOKENS, so no cached verdict can answer it.
local tokens = {}
for line in io.lines(os.getenv("TOKENS")) do
  tokens[#tokens + 1] = line
end
local body = os.getenv("BODY")
local i = 0
request = function()
  i = i % #tokens + 1
  return wrk.format("POST", nil, {
    ["Content-Type"] = "application/json",
    ["Authorization"] = "Bearer " .. tokens[i],
  }, body)
end
