-- Argo CD health check for etcd.steward.dev/EtcdSnapshot.
-- Reads status.phase and the conditions etcd-steward writes with it. Healthy
-- only once Complete and read back (Verified=True); a snapshot with no
-- status yet, or one still being taken or retried, is Progressing; a Failed
-- one is Degraded. The spec is immutable, so there is no generation for the
-- status to fall behind on; observedGeneration is not read.
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

if obj.status == nil or obj.status.phase == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for etcd-steward to take the snapshot"
  return hs
end

local phase = obj.status.phase
local c = conditions(obj)
local ready = c.Ready

if phase == "Pending" or phase == "Started" then
  -- Waiting for the cluster, streaming, or a failed attempt's retry.
  hs.status = "Progressing"
  if ready ~= nil then
    hs.message = describe(ready)
  else
    hs.message = phase
  end
  return hs
end

if phase == "Complete" then
  local verified = c.Verified
  if verified ~= nil and verified.status == "True" then
    hs.status = "Healthy"
    if ready ~= nil and ready.message ~= nil and ready.message ~= "" then
      hs.message = ready.message
    else
      hs.message = "Complete"
    end
    return hs
  end
  -- etcd-steward only writes Complete once the object is read back; an
  -- unverified snapshot is not one to restore from.
  hs.status = "Degraded"
  if verified == nil then
    hs.message = "Complete but not verified: no Verified condition"
  else
    hs.message = "Complete but not verified: " .. describe(verified)
  end
  return hs
end

if phase == "Failed" then
  hs.status = "Degraded"
  if ready ~= nil then
    hs.message = describe(ready)
  elseif c.Stalled ~= nil and c.Stalled.status == "True" then
    hs.message = describe(c.Stalled)
  else
    hs.message = "Failed"
  end
  return hs
end

hs.status = "Unknown"
hs.message = "Unknown phase " .. tostring(phase)
return hs
