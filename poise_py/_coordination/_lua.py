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

``load`` is :meth:`poise_py.SharedState.damage` line by line: a record with a field out of
range answers its problem, naming the key, and a trip replaces it (as it replaces one whose
deadline lies past the caller's horizon). Before a script writes anything it checks the
change log's keys (``repair_ledger``), so it applies all its effects or none.
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

local function fmt(x)
  if x == nil then return '' end
  return string.format('%.17g', x)
end

local STATES = {closed = true, open = true, half_open = true}

-- A record nobody can use: what is wrong with it, naming the key (the fence never matches).
local function poisoned(key, problem)
  return {key = key, problem = 'key ' .. key .. ': ' .. problem, state = 'closed', version = -1,
          failed_rounds = 0, probes_permitted = 0, probes_remaining = 0, probes_completed = 0,
          protocol_version = 0}
end

local SLACK = 1.0  -- CLOCK_SLACK in _protocol.py

-- An integer in [0, 2**53] (the counts and the version).
local function count(x)
  return x ~= nil and x >= 0 and x <= CAP and x == math.floor(x)
end

local function load(key)
  local f = redis.pcall('HMGET', key, unpack(FIELDS))
  if f.err then  -- WRONGTYPE: only then ask what it is
    local kind = redis.call('TYPE', key)
    if type(kind) == 'table' then kind = kind.ok end
    return poisoned(key, 'a ' .. tostring(kind) .. ', not a hash')
  end
  if f[1] and not STATES[f[1]] then return poisoned(key, "unknown state '" .. string.sub(f[1], 1, 64) .. "'") end
  for i = 2, #FIELDS do
    if f[i] and not finite(tonumber(f[i])) then
      return poisoned(key, FIELDS[i] .. " is not a finite number: '" .. string.sub(f[i], 1, 64) .. "'")
    end
  end
  local r = {
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
  -- SharedState.damage, line for line (the horizon is applied by trips and by the balancer)
  for _, name in ipairs({'version', 'failed_rounds', 'probes_permitted', 'probes_remaining',
                         'probes_completed', 'protocol_version'}) do
    if not count(r[name]) then
      return poisoned(key, name .. ' is not an integer in [0, 2**53]: ' .. fmt(r[name]))
    end
  end
  if r.probes_remaining > r.probes_permitted then
    return poisoned(key, 'probes_remaining ' .. fmt(r.probes_remaining) .. ' exceeds probes_permitted '
                    .. fmt(r.probes_permitted))
  end
  if r.state ~= 'closed' then
    if r.opened_at == nil or r.reopen_at == nil then
      return poisoned(key, 'state ' .. r.state .. ' without opened_at and reopen_at')
    end
    if r.reopen_at < r.opened_at then
      return poisoned(key, 'reopen_at ' .. fmt(r.reopen_at) .. ' is before opened_at ' .. fmt(r.opened_at))
    end
    if r.opened_at > now + SLACK then
      return poisoned(key, 'opened_at ' .. fmt(r.opened_at) .. ' is ' .. fmt(r.opened_at - now)
                      .. " s after the storage's clock: the clock moved back, or the record was written by hand")
    end
  end
  return r
end

-- The record a write starts from: an unusable one, or (given the caller's horizon) one
-- whose deadline lies further out than any wait the fleet writes, is replaced.
local function load_for_write(key, horizon)
  local r = load(key)
  if r.problem or (horizon and r.state ~= 'closed' and r.reopen_at - now > horizon) then
    redis.call('DEL', key)
    r = load(key)
  end
  return r
end

-- The change log's keys (protocol 3: KEYS[2] the sequence, KEYS[3] key -> sequence), checked
-- before a script writes anything, so that it either applies all its effects or none: what
-- is wrong with them (naming the key) or nil, the sequence number (0 when there is none or
-- it is damaged), and whether the sequence itself is damaged.
local function ledger_damage(sequence, changes)
  local seq = redis.pcall('GET', sequence)
  if type(seq) == 'table' and seq.err then
    local kind = redis.call('TYPE', sequence)
    if type(kind) == 'table' then kind = kind.ok end
    return 'key ' .. sequence .. ': a ' .. tostring(kind) .. ', not a sequence number', 0, true
  end
  if seq and not (string.match(seq, '^%d+$') and #seq <= 15) then
    return 'key ' .. sequence .. ": not a sequence number: '" .. string.sub(seq, 1, 64) .. "'", 0, true
  end
  if changes then
    local kind = redis.call('TYPE', changes)
    if type(kind) == 'table' then kind = kind.ok end
    if kind ~= 'zset' and kind ~= 'none' then
      return 'key ' .. changes .. ': a ' .. tostring(kind) .. ', not a sorted set', tonumber(seq or '0'), false
    end
  end
  return nil, tonumber(seq or '0'), false
end

-- Before a write: a damaged change-log key is replaced. The sequence goes on from the
-- highest number it or the log still vouch for, and the log gets a mark (the sequence key's
-- name) at the next number, so that a poll whose range covers the repair reads everything.
local ledger_note = ''
local function repair_ledger()
  if proto < 3 or not KEYS[3] then return end
  local problem, seq, bad_sequence = ledger_damage(KEYS[2], KEYS[3])
  if not problem then return end
  ledger_note = problem
  if bad_sequence then
    redis.call('DEL', KEYS[2])
    seq = 0
    local top = redis.pcall('ZREVRANGE', KEYS[3], 0, 0, 'WITHSCORES')
    if not top.err and top[2] then
      local score = tonumber(top[2])
      if score and score >= 0 and score < 1e15 and score == math.floor(score) then seq = score
      else redis.call('DEL', KEYS[3]) end  -- scores no sequence wrote: no log to go on from
    elseif top.err then
      redis.call('DEL', KEYS[3])
    end
  else
    redis.call('DEL', KEYS[3])
  end
  redis.call('SET', KEYS[2], string.format('%d', seq))
end

-- The failed-round count protocol 2 trusts: only a protocol-2 writer's.
local function rounds(r)
  if r.protocol_version >= 2 then return r.failed_rounds end
  return 0
end

local function answer(applied, r)
  if r.problem then
    return {0, 'closed', '-1', '', '', '0', '0', '0', '0', '0', fmt(now), r.problem, ledger_note}
  end
  local failed = 0
  if proto >= 2 then failed = rounds(r) end
  return {applied and 1 or 0, r.state, fmt(r.version), fmt(r.opened_at), fmt(r.reopen_at), fmt(failed),
          fmt(r.probes_permitted), fmt(r.probes_remaining), fmt(r.probes_completed),
          fmt(r.protocol_version), fmt(now), '', ledger_note}
end

local function save(r, state_change)
  repair_ledger()
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
  if r.reopen_at and r.reopen_at > now then keep = keep + math.min(r.reopen_at - now, 1e9) end
  redis.call('PEXPIRE', r.key, math.ceil(keep * 1000))
  -- Protocol 3: the namespace's change log (checked by repair_ledger before any write).
  if proto >= 3 and KEYS[3] then
    local seq = redis.call('INCR', KEYS[2])
    redis.call('ZADD', KEYS[3], seq, r.key)
    if ledger_note ~= '' then redis.call('ZADD', KEYS[3], seq, KEYS[2]) end  -- the repair's mark
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
local horizon = tonumber(ARGV[11] or '')
if not (finite(base) and finite(maximum) and finite(multiplier) and finite(jitter) and finite(unit)
        and finite(minimum) and base > 0 and maximum >= base and multiplier > 1
        and jitter >= 0 and jitter < 1 and unit >= 0 and unit < 1 and minimum >= 0
        and (horizon == nil or (finite(horizon) and horizon >= 0))) then
  return redis.error_reply('poise: invalid open wait')
end
local r = load_for_write(KEYS[1], horizon)
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
local since, limit, prefix = tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5]
local problem, seq = ledger_damage(KEYS[1], nil)
if problem then return {'0', 'damaged', problem} end
if since < 0 or seq == since then return {fmt(seq)} end
if seq < since then return {fmt(seq), 'reset'} end
local keys = redis.pcall('ZRANGEBYSCORE', KEYS[2], '(' .. fmt(since), fmt(seq), 'LIMIT', 0, limit + 1)
if keys.err then return {fmt(seq), 'damaged', ledger_damage(KEYS[1], KEYS[2]) or keys.err} end
if #keys > limit then return {fmt(seq), 'overflow'} end
local out = {fmt(seq), 'changes'}
for _, key in ipairs(keys) do
  if key == KEYS[1] then return {fmt(seq), 'reset'} end  -- a repaired log: read everything
  if string.sub(key, 1, #prefix) == prefix then  -- a member naming any other key is no record of ours
    out[#out + 1] = key
    out[#out + 1] = answer(false, load(key))
  end
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
