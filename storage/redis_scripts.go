package storage

import "github.com/redis/go-redis/v9"

// The Lua scripts of the Redis mirror. Each runs atomically on the keys of one board (one
// hash tag, so one cluster slot); see redis.go for the key layout.

// upsertLua defines upsert(z, u, n, m, topN, ...): the version-guarded write of one
// absolute entry state. It returns whether the entry changed within the first topN ranks
// (before or after the write: the cached top-N may change; topN 0: never asked), and
// whether the top would show something new about the user (a nick name or metadata). A
// state without a member is an entry that is gone (its user banned, or removed by an
// admin): the entry is deleted unless Redis holds a newer version.
const upsertLua = `
local function inTop(z, member, topN)
  if topN == 0 or member == '' then return false end
  local r = redis.call('ZREVRANK', z, member)
  return r ~= false and r ~= nil and r < topN
end
local function upsert(z, u, n, m, topN, user, score, sortkey, version, updated, member, nick, meta)
  if member == '' then
    local cur = redis.call('HGET', u, user)
    if not cur then return false, false end
    local _, cv, _, cm = string.match(cur, '^([^|]*)|([^|]*)|([^|]*)|(.*)$')
    if tonumber(cv) >= version then return false, false end
    local was = inTop(z, cm, topN)
    redis.call('ZREM', z, cm)
    redis.call('HDEL', u, user)
    redis.call('HDEL', n, user)
    redis.call('HDEL', m, user)
    return was, false
  end
  local renamed = false
  if nick ~= '' and redis.call('HGET', n, user) ~= nick then
    redis.call('HSET', n, user, nick)
    renamed = true
  end
  local cur = redis.call('HGET', u, user)
  local was = false
  if cur then
    local _, cv, _, cm = string.match(cur, '^([^|]*)|([^|]*)|([^|]*)|(.*)$')
    if tonumber(cv) >= version then
      return renamed and inTop(z, cm, topN), renamed
    end
    was = inTop(z, cm, topN)
    if cm ~= member then
      redis.call('ZREM', z, cm)
    end
  end
  redis.call('ZADD', z, sortkey, member)
  redis.call('HSET', u, user, score .. '|' .. version .. '|' .. updated .. '|' .. member)
  if meta == '' then
    if redis.call('HDEL', m, user) == 1 then renamed = true end
  elseif redis.call('HGET', m, user) ~= meta then
    redis.call('HSET', m, user, meta)
    renamed = true
  end
  return was or inTop(z, member, topN), renamed
end
`

// topLua defines refreshTop(z, u, n, m, top, ver, topN, minVersion, now, force): it
// recomputes the cached top-N and, when its members or their order changed (or force is
// set: a nick name or metadata changed), gives it the next version of the board (the
// board-wide counter ver, so versions rise across periods too, never below minVersion).
// It returns {changed, version, updated, body}; a body line is user TAB score TAB updated
// TAB nick TAB metadata.
const topLua = `
local function refreshTop(z, u, n, m, topKey, ver, topN, minVersion, now, force)
  local top = redis.call('ZREVRANGE', z, 0, topN - 1, 'WITHSCORES')
  local digest = table.concat(top, ',')
  local meta = redis.call('HMGET', topKey, 'version', 'digest', 'updated', 'body')
  local curVersion = tonumber(meta[1]) or 0
  if meta[2] == digest and meta[4] and not force then
    return {0, curVersion, meta[3], meta[4]}
  end
  local lines = {}
  for k = 1, #top, 2 do
    local user = string.sub(top[k], 18)
    local h = redis.call('HGET', u, user) or ''
    local score, _, upd = string.match(h, '^([^|]*)|([^|]*)|([^|]*)|')
    local nick = redis.call('HGET', n, user) or ''
    local md = redis.call('HGET', m, user) or ''
    lines[#lines + 1] = user .. '\t' .. (score or '0') .. '\t' .. (upd or '0') .. '\t' .. nick .. '\t' .. md
  end
  local body = table.concat(lines, '\n')
  local version = math.max(redis.call('INCR', ver), minVersion, curVersion + 1)
  redis.call('SET', ver, version, 'KEEPTTL')
  redis.call('HSET', topKey, 'version', version, 'digest', digest, 'updated', now, 'body', body)
  return {1, version, now, body}
end
`

// expireLua defines expire(topKey, ver, ttl, first, last): a period's keys live ttl ms
// after the last write (0: forever); the top, whose presence marks a loaded period, goes a
// second before the rest, so no reader sees a top over missing entries. The board's version
// counter ver lives as long as the longest-lived of its periods, so a board whose periods
// all expire (a finished match) leaves nothing behind; versions still rise after that, as
// loads start above PostgreSQL's history.
const expireLua = `
local function expire(topKey, ver, ttl, first, last)
  if ttl <= 0 then return end
  for k = first, last do redis.call('PEXPIRE', KEYS[k], ttl) end
  redis.call('PEXPIRE', topKey, math.max(ttl - 1000, 1))
  if redis.call('PTTL', ver) < ttl then redis.call('PEXPIRE', ver, ttl) end
end
`

// applyScript mirrors absolute entry states with a version guard (into the shadow keys
// too while a rebuild runs), then refreshes the cached top-N when an entry changed within
// it; otherwise it answers the top's version and time without its body. It writes nothing
// and returns {-2} when the board is not loaded (no top): the caller loads it from
// PostgreSQL.
// KEYS: z, u, n, m, top, rebuild marker, shadow z, u, n, m, ver.
// ARGV: topN, minVersion, now µs, ttl ms, count, then count × (user, score, sortkey,
// version, updated µs, member, nick, metadata).
var applyScript = redis.NewScript(upsertLua + topLua + expireLua + `
if redis.call('EXISTS', KEYS[5]) == 0 then return {-2} end
local topN, minVersion, now, ttl, count = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5])
local rebuilding = redis.call('EXISTS', KEYS[6]) == 1
local touched, renamed = false, false
local i = 6
for _ = 1, count do
  local user, score, sortkey, version, updated, member, nick, meta = ARGV[i], ARGV[i+1], ARGV[i+2], tonumber(ARGV[i+3]), ARGV[i+4], ARGV[i+5], ARGV[i+6], ARGV[i+7]
  i = i + 8
  local inside, named = upsert(KEYS[1], KEYS[2], KEYS[3], KEYS[4], topN, user, score, sortkey, version, updated, member, nick, meta)
  if inside then
    touched = true
    if named then renamed = true end
  end
  if rebuilding then upsert(KEYS[7], KEYS[8], KEYS[9], KEYS[10], 0, user, score, sortkey, version, updated, member, nick, meta) end
end
expire(KEYS[5], KEYS[11], ttl, 1, 4)
if not touched then
  local meta = redis.call('HMGET', KEYS[5], 'version', 'updated')
  return {0, tonumber(meta[1]) or 0, meta[2] or '0', ''}
end
return refreshTop(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[11], topN, minVersion, now, renamed)
`)

// loadScript writes entry states (version-guarded, so newer states the projector wrote
// meanwhile win) into a board's keys: the live ones when loading on demand, the shadow
// ones during a rebuild. KEYS: z, u, n, m. ARGV: count, then entries as apply's.
var loadScript = redis.NewScript(upsertLua + `
local count = tonumber(ARGV[1])
local i = 2
for _ = 1, count do
  upsert(KEYS[1], KEYS[2], KEYS[3], KEYS[4], 0, ARGV[i], ARGV[i+1], ARGV[i+2], tonumber(ARGV[i+3]), ARGV[i+4], ARGV[i+5], ARGV[i+6], ARGV[i+7])
  i = i + 8
end
return count
`)

// sealScript ends a load on demand: it computes the top (which marks the board loaded)
// with a new version and sets the keys' lifetime.
// KEYS: z, u, n, m, top, ver. ARGV: topN, minVersion, now µs, ttl ms.
var sealScript = redis.NewScript(topLua + expireLua + `
local res = refreshTop(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3], true)
expire(KEYS[5], KEYS[6], tonumber(ARGV[4]), 1, 4)
return res
`)

// swapScript replaces the live board with the shadow one in one step, ends the rebuild
// and refreshes the top with a new version. It does nothing and returns {-1} unless the
// rebuild marker still holds the caller's token.
// KEYS: z, u, n, m, top, rebuild marker, shadow z, u, n, m, ver. ARGV: topN, minVersion, now µs, token, ttl ms.
var swapScript = redis.NewScript(topLua + expireLua + `
if redis.call('GET', KEYS[6]) ~= ARGV[4] then return {-1, 0} end
for k = 1, 4 do
  if redis.call('EXISTS', KEYS[k + 6]) == 1 then
    redis.call('RENAME', KEYS[k + 6], KEYS[k])
  else
    redis.call('DEL', KEYS[k])
  end
end
redis.call('DEL', KEYS[6])
local res = refreshTop(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[11], tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3], true)
expire(KEYS[5], KEYS[11], tonumber(ARGV[5]), 1, 4)
return res
`)

// userScript returns {"score|version|updated|member", zero-based rank, metadata}, false
// when the user has no entry, or -1 when the board is not loaded.
// KEYS: z, u, m, top.
var userScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[4]) == 0 then return -1 end
local h = redis.call('HGET', KEYS[2], ARGV[1])
if not h then return false end
local member = string.match(h, '^[^|]*|[^|]*|[^|]*|(.*)$')
local rank = redis.call('ZREVRANK', KEYS[1], member)
if not rank then return false end
return {h, rank, redis.call('HGET', KEYS[3], ARGV[1]) or ''}
`)

// entriesLua defines entries(u, n, m, list): for members returned WITHSCORES, the flat
// array member, sort key, "value|version|updated|member", nick name, metadata of each.
const entriesLua = `
local function entries(u, n, m, list)
  local out = {}
  for k = 1, #list, 2 do
    local user = string.sub(list[k], 18)
    out[#out + 1] = list[k]
    out[#out + 1] = list[k + 1]
    out[#out + 1] = redis.call('HGET', u, user) or ''
    out[#out + 1] = redis.call('HGET', n, user) or ''
    out[#out + 1] = redis.call('HGET', m, user) or ''
  end
  return out
end
`

// pageScript returns a page of entries in rank order: {first rank (0-based), entries}, or
// -1 when the board is not loaded. With a cursor (sort key, member) the page starts right
// after that position in the current order, wherever the cursor's entry is now: the script
// puts the cursor member at the cursor's sort key for the moment it reads the rank, then
// restores it (a script runs atomically: nobody sees it).
// KEYS: z, u, n, m, top. ARGV: size, has cursor (0/1), cursor sort key, cursor member.
var pageScript = redis.NewScript(entriesLua + `
if redis.call('EXISTS', KEYS[5]) == 0 then return -1 end
local size, start = tonumber(ARGV[1]), 0
if ARGV[2] == '1' then
  local old = redis.call('ZSCORE', KEYS[1], ARGV[4])
  redis.call('ZADD', KEYS[1], ARGV[3], ARGV[4])
  start = redis.call('ZREVRANK', KEYS[1], ARGV[4]) + 1
  if old then redis.call('ZADD', KEYS[1], old, ARGV[4]) else redis.call('ZREM', KEYS[1], ARGV[4]) end
end
return {start, entries(KEYS[2], KEYS[3], KEYS[4], redis.call('ZREVRANGE', KEYS[1], start, start + size - 1, 'WITHSCORES'))}
`)

// aroundScript returns the entries from n places above a user to n below, in rank order:
// {first rank (0-based), entries, the user's rank}; false when the user has no entry, -1
// when the board is not loaded. KEYS: z, u, n, m, top. ARGV: user, n.
var aroundScript = redis.NewScript(entriesLua + `
if redis.call('EXISTS', KEYS[5]) == 0 then return -1 end
local h = redis.call('HGET', KEYS[2], ARGV[1])
if not h then return false end
local rank = redis.call('ZREVRANK', KEYS[1], string.match(h, '^[^|]*|[^|]*|[^|]*|(.*)$'))
if not rank then return false end
local from = math.max(0, rank - tonumber(ARGV[2]))
return {from, entries(KEYS[2], KEYS[3], KEYS[4], redis.call('ZREVRANGE', KEYS[1], from, rank + tonumber(ARGV[2]), 'WITHSCORES')), rank}
`)

// usersScript returns the entries of the given users that have one: a flat array of rank
// (0-based) followed by the entry fields, for each; -1 when the board is not loaded.
// KEYS: z, u, n, m, top. ARGV: user ids.
var usersScript = redis.NewScript(entriesLua + `
if redis.call('EXISTS', KEYS[5]) == 0 then return -1 end
local out = {}
for _, user in ipairs(ARGV) do
  local h = redis.call('HGET', KEYS[2], user)
  if h then
    local member = string.match(h, '^[^|]*|[^|]*|[^|]*|(.*)$')
    local rank = redis.call('ZREVRANK', KEYS[1], member)
    local score = redis.call('ZSCORE', KEYS[1], member)
    if rank then
      out[#out + 1] = rank
      for _, v in ipairs(entries(KEYS[2], KEYS[3], KEYS[4], {member, score})) do out[#out + 1] = v end
    end
  end
end
return out
`)

// topReadScript reads a cached top: nil when the period is not loaded; {version, updated}
// when they are ARGV's (the caller has that top already); else {version, updated, body}.
// KEYS: top. ARGV: the version and updated the caller knows (empty for none).
var topReadScript = redis.NewScript(`
local m = redis.call('HMGET', KEYS[1], 'version', 'updated')
if not m[1] then return false end
if m[1] == ARGV[1] and m[2] == ARGV[2] then return {m[1], m[2]} end
return {m[1], m[2], redis.call('HGET', KEYS[1], 'body') or ''}
`)
