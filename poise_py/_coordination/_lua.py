"""The Lua scripts of :class:`RedisStorage`: one per operation, each atomic on the server.

They transcribe :class:`~poise_py._coordination._memory.InMemoryStorage`. Every script
reads the server clock with ``TIME`` (the only clock that decides OPEN -> HALF_OPEN),
touches exactly one key (so any hash tag works under Redis Cluster; the namespace tag
also lets :data:`READ` take many keys in one call), stamps the caller's protocol version
on what it writes, and answers with the whole record. Numbers travel as strings
(``%.17g``), because Redis would truncate a Lua number reply to an integer.

``window`` is :meth:`poise_py.Escalation.window` line by line, clamp included: the cap
is decided in log space before any power is built, and the count saturates at 2**53, so
no argument and no count can produce an infinite or absurd wait.
"""

from __future__ import annotations

PRELUDE = r"""
if redis.replicate_commands then redis.replicate_commands() end
local proto = tonumber(ARGV[1])
local retention = tonumber(ARGV[2])
local clock = redis.call('TIME')
local now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000
local CAP = 9007199254740992
local FIELDS = {'state', 'version', 'opened_at', 'reopen_at', 'failed_rounds',
                'probes_permitted', 'probes_remaining', 'probes_completed', 'protocol_version'}

local function num(v, default)
  if v then return tonumber(v) end
  return default
end

local function finite(x)
  return x ~= nil and x == x and x ~= math.huge and x ~= -math.huge
end

local STATES = {closed = true, open = true, half_open = true}

-- A record nobody can use: what is wrong with it, naming the key (the fence never matches).
local function poisoned(key, problem)
  return {key = key, problem = 'key ' .. key .. ': ' .. problem, state = 'closed', version = -1,
          failed_rounds = 0, probes_permitted = 0, probes_remaining = 0, probes_completed = 0,
          protocol_version = 0}
end

local function load(key)
  local f = redis.pcall('HMGET', key, unpack(FIELDS))
  if f.err then  -- WRONGTYPE: only then ask what it is
    local kind = redis.call('TYPE', key)
    if type(kind) == 'table' then kind = kind.ok end
    return poisoned(key, 'a ' .. tostring(kind) .. ', not a hash')
  end
  if f[1] and not STATES[f[1]] then return poisoned(key, "unknown state '" .. f[1] .. "'") end
  for i = 2, #FIELDS do
    if f[i] and not finite(tonumber(f[i])) then
      return poisoned(key, FIELDS[i] .. " is not a finite number: '" .. f[i] .. "'")
    end
  end
  return {
    key = key,
    state = f[1] or 'closed',
    version = num(f[2], 0),
    opened_at = num(f[3], nil),
    reopen_at = num(f[4], nil),
    failed_rounds = num(f[5], 0),
    probes_permitted = num(f[6], 0),
    probes_remaining = num(f[7], 0),
    probes_completed = num(f[8], 0),
    protocol_version = num(f[9], 0),
  }
end

-- The record a write starts from: an unusable one is replaced (the next write repairs it).
local function load_for_write(key)
  local r = load(key)
  if r.problem then
    redis.call('DEL', key)
    r = load(key)
  end
  return r
end

-- The failed-round count protocol 2 trusts: only a protocol-2 writer's.
local function rounds(r)
  if r.protocol_version >= 2 then return r.failed_rounds end
  return 0
end

local function fmt(x)
  if x == nil then return '' end
  return string.format('%.17g', x)
end

local function answer(applied, r)
  if r.problem then
    return {0, 'closed', '-1', '', '', '0', '0', '0', '0', '0', fmt(now), r.problem}
  end
  local failed = 0
  if proto >= 2 then failed = rounds(r) end
  return {applied and 1 or 0, r.state, fmt(r.version), fmt(r.opened_at), fmt(r.reopen_at), fmt(failed),
          fmt(r.probes_permitted), fmt(r.probes_remaining), fmt(r.probes_completed),
          fmt(r.protocol_version), fmt(now), ''}
end

local function save(r, state_change)
  if state_change then r.version = r.version + 1 end
  local failed = r.failed_rounds
  r.protocol_version = proto
  local args = {'state', r.state, 'version', fmt(r.version),
                'probes_permitted', fmt(r.probes_permitted), 'probes_remaining', fmt(r.probes_remaining),
                'probes_completed', fmt(r.probes_completed), 'protocol_version', fmt(proto)}
  -- Protocol 1 neither counts nor resets; stamping protocol 2 vouches for the count.
  if proto >= 2 then
    table.insert(args, 'failed_rounds')
    table.insert(args, fmt(failed))
  end
  redis.call('HSET', r.key, unpack(args))
  if r.opened_at then redis.call('HSET', r.key, 'opened_at', fmt(r.opened_at))
  else redis.call('HDEL', r.key, 'opened_at') end
  if r.reopen_at then redis.call('HSET', r.key, 'reopen_at', fmt(r.reopen_at))
  else redis.call('HDEL', r.key, 'reopen_at') end
  local keep = retention
  if r.reopen_at and r.reopen_at > now then keep = keep + (r.reopen_at - now) end
  redis.call('PEXPIRE', r.key, math.ceil(keep * 1000))
  -- Protocol 3: the namespace's change log (KEYS[2] the sequence, KEYS[3] key -> sequence).
  if proto >= 3 and KEYS[3] then
    local seq = redis.call('INCR', KEYS[2])
    redis.call('ZADD', KEYS[3], seq, r.key)
    local ttl = math.ceil((retention + 3600) * 1000)
    redis.call('PEXPIRE', KEYS[2], ttl)
    redis.call('PEXPIRE', KEYS[3], ttl)
  end
  return answer(true, r)
end

-- Escalation.window, clamp included (see the module docstring of poise_py._core._ejection).
local function window(n, base, maximum, linear, multiplier)
  if n <= 0 then return base end
  if linear then
    if n + 1 >= maximum / base then return maximum end
    return math.min(base * (n + 1), maximum)
  end
  local growth = n * math.log(multiplier)
  if growth >= math.log(maximum) - math.log(base) then return maximum end
  if growth < 700 then return math.min(base * multiplier ^ n, maximum) end
  return math.min(math.exp(math.log(base) + growth), maximum)
end
"""

READ = r"""
local out = {}
for i, key in ipairs(KEYS) do out[i] = answer(false, load(key)) end
return out
"""

TRIP_OPEN = r"""
local expected = tonumber(ARGV[3])
local base, maximum = tonumber(ARGV[4]), tonumber(ARGV[5])
local linear, multiplier = ARGV[6] == '1', tonumber(ARGV[7])
local jitter, unit, minimum = tonumber(ARGV[8]), tonumber(ARGV[9]), tonumber(ARGV[10])
if not (finite(base) and finite(maximum) and finite(multiplier) and finite(jitter) and finite(unit)
        and finite(minimum) and base > 0 and maximum >= base and multiplier > 1
        and jitter >= 0 and jitter < 1 and unit >= 0 and unit < 1 and minimum >= 0) then
  return redis.error_reply('poise: invalid open wait')
end
local r = load_for_write(KEYS[1])
if r.version ~= expected or r.state == 'open' then return answer(false, r) end
local failed = rounds(r)
if proto >= 2 and r.state == 'half_open' then failed = math.min(failed + 1, CAP) end
local wait = base
if proto >= 2 then wait = window(math.min(failed, CAP), base, maximum, linear, multiplier) end
if jitter > 0 then wait = wait * (1 + jitter * (2 * unit - 1)) end
wait = math.max(math.min(wait, maximum), minimum)
r.state = 'open'
r.failed_rounds = failed
r.opened_at = now
r.reopen_at = now + wait
r.probes_permitted, r.probes_remaining, r.probes_completed = 0, 0, 0
return save(r, true)
"""

BEGIN_HALF_OPEN = r"""
local expected, permitted, lease = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
if not (finite(permitted) and permitted >= 1 and finite(lease) and lease > 0) then
  return redis.error_reply('poise: invalid probe budget')
end
local r = load(KEYS[1])
if r.problem or r.version ~= expected or r.state == 'closed' or now < (r.reopen_at or 0) then
  return answer(false, r)
end
r.failed_rounds = rounds(r)
r.state = 'half_open'
r.reopen_at = now + lease
r.probes_permitted, r.probes_remaining, r.probes_completed = permitted, permitted, 0
return save(r, true)
"""

LEASE_PROBE = r"""
local expected = tonumber(ARGV[3])
local r = load(KEYS[1])
if r.problem or r.version ~= expected or r.state ~= 'half_open' or r.probes_remaining <= 0
   or now >= (r.reopen_at or 0) then
  return answer(false, r)
end
r.failed_rounds = rounds(r)
r.probes_remaining = r.probes_remaining - 1
return save(r, false)
"""

REPORT_PROBE = r"""
local expected, report = tonumber(ARGV[3]), ARGV[4]
if report ~= 'succeeded' and report ~= 'released' then
  return redis.error_reply('poise: invalid probe report')
end
local r = load(KEYS[1])
if r.problem or r.version ~= expected or r.state ~= 'half_open' then return answer(false, r) end
r.failed_rounds = rounds(r)
if report == 'succeeded' then
  r.probes_completed = r.probes_completed + 1
else
  r.probes_remaining = math.min(r.probes_remaining + 1, r.probes_permitted)
end
return save(r, false)
"""

CLOSE = r"""
local expected = tonumber(ARGV[3])
local r = load(KEYS[1])
if r.problem or r.version ~= expected or r.state ~= 'half_open' then return answer(false, r) end
r.state = 'closed'
r.failed_rounds = 0
r.opened_at, r.reopen_at = nil, nil
r.probes_permitted, r.probes_remaining, r.probes_completed = 0, 0, 0
return save(r, true)
"""

CHANGES = r"""
local since, limit = tonumber(ARGV[3]), tonumber(ARGV[4])
local seq = tonumber(redis.call('GET', KEYS[1]) or '0')
if since < 0 or seq == since then return {fmt(seq)} end
if seq < since then return {fmt(seq), 'reset'} end
local keys = redis.call('ZRANGEBYSCORE', KEYS[2], '(' .. fmt(since), '+inf', 'LIMIT', 0, limit + 1)
if #keys > limit then return {fmt(seq), 'overflow'} end
local out = {fmt(seq), 'changes'}
for _, key in ipairs(keys) do
  out[#out + 1] = key
  out[#out + 1] = answer(false, load(key))
end
return out
"""

SCRIPTS = {
    "read": READ,
    "changes": CHANGES,
    "trip_open": TRIP_OPEN,
    "begin_half_open_if_elapsed": BEGIN_HALF_OPEN,
    "lease_probe": LEASE_PROBE,
    "report_probe": REPORT_PROBE,
    "close": CLOSE,
}
"""Each operation's script body; :data:`PRELUDE` is prepended to each."""
