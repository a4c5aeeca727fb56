-- Argo CD health check for etcd.steward.dev/EtcdCluster.
-- Reads the conditions etcd-steward writes on every reconcile; an absent or
-- stale status is never reported as Healthy.
local hs = {}

local function conditions(obj)
  local byType = {}
  if obj.status ~= nil and obj.status.conditions ~= nil then
    for _, c in ipairs(obj.status.conditions) do
      byType[c.type] = c
    end
  end
  return byType
end

local function describe(c)
  if c.message ~= nil and c.message ~= "" then
    return c.reason .. ": " .. c.message
  end
  return c.reason
end

if obj.metadata.deletionTimestamp ~= nil then
  hs.status = "Progressing"
  hs.message = "Deleting"
  return hs
end

if obj.status == nil or obj.status.conditions == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for etcd-steward to report status"
  return hs
end

if obj.status.observedGeneration == nil or obj.status.observedGeneration < obj.metadata.generation then
  hs.status = "Progressing"
  hs.message = "Waiting for etcd-steward to observe generation " .. tostring(obj.metadata.generation)
  return hs
end

local c = conditions(obj)

if c.Stalled ~= nil and c.Stalled.status == "True" then
  hs.status = "Degraded"
  hs.message = describe(c.Stalled)
  return hs
end

if obj.spec ~= nil and obj.spec.replicas == 0 then
  hs.status = "Suspended"
  hs.message = "Paused at 0 replicas"
  return hs
end

local available = c.Available
if available ~= nil and available.status == "True" then
  hs.status = "Healthy"
  if c.Degraded ~= nil and c.Degraded.status == "True" then
    -- Serving with quorum, but a member is down: healthy for Argo,
    -- and the message says what is wrong.
    hs.message = "Available, degraded: " .. describe(c.Degraded)
  else
    hs.message = describe(available)
  end
  return hs
end

if c.Reconciling ~= nil and c.Reconciling.status == "True" then
  hs.status = "Progressing"
  hs.message = describe(c.Reconciling)
  return hs
end

hs.status = "Degraded"
if available == nil then
  hs.message = "No Available condition"
elseif available.status == "Unknown" then
  hs.message = "Health not verified: " .. describe(available)
else
  hs.message = describe(available)
end
return hs
