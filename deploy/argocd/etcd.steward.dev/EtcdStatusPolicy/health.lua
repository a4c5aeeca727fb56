-- Argo CD health check for etcd.steward.dev/EtcdStatusPolicy.
-- Healthy only while the pinned component runs and its evaluations answer:
-- while none runs, or while it runs but fails (Degraded=True,
-- EvaluationsFailing), every cluster that selects it gets the fallback
-- verdict, so the policy is Degraded, even while its registry is retried.
local hs = {}

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
  hs.message = "Waiting for etcd-steward to load the policy"
  return hs
end

if obj.status.observedGeneration == nil or obj.status.observedGeneration < obj.metadata.generation then
  hs.status = "Progressing"
  hs.message = "Waiting for etcd-steward to load generation " .. tostring(obj.metadata.generation)
  return hs
end

local c = {}
for _, cond in ipairs(obj.status.conditions) do
  c[cond.type] = cond
end

-- Loaded but failing: the pinned version runs, yet its evaluations trap,
-- time out or are rejected, so the clusters that select it read the
-- fallback verdict. Not healthy, whatever Ready says about loading.
if c.Ready ~= nil and c.Ready.status == "True" and c.Degraded ~= nil and c.Degraded.status == "True" then
  hs.status = "Degraded"
  hs.message = describe(c.Degraded)
  return hs
end

if c.Ready ~= nil and c.Ready.status == "True" then
  hs.status = "Healthy"
  hs.message = describe(c.Ready)
  return hs
end

if c.Stalled ~= nil and c.Stalled.status == "True" then
  hs.status = "Degraded"
  hs.message = describe(c.Stalled)
  return hs
end

hs.status = "Degraded"
if c.Ready == nil then
  hs.message = "No Ready condition"
else
  hs.message = describe(c.Ready)
end
return hs
