package storage

import "github.com/redis/go-redis/v9"

// The Lua scripts of the Redis mirror. Each runs atomically on the keys of one board and
// period (one hash tag, so one cluster slot); see redis.go for the key layout.

// upsertLua defines upsert(z, u, n, ...): the version-guarded write of one absolute
// entry state; it returns true when the user's nick name changed.
const upsertLua = `
local function upsert(z, u, n, user, score, version, updated, member, nick)
  local renamed = false
  if nick ~= '' and redis.call('HGET', n, user) ~= nick then
    redis.call('HSET', n, user, nick)
    renamed = true
  end
  local cur = redis.call('HGET', u, user)
  if cur then
    local _, cv, _, cm = string.match(cur, '^([^|]*)|([^|]*)|([^|]*)|(.*)$')
    if tonumber(cv) >= version then
      return renamed
    end
    if cm ~= member then
      redis.call('ZREM', z, cm)
    end
  end
  redis.call('ZADD', z, score, member)
  redis.call('HSET', u, user, score .. '|' .. version .. '|' .. updated .. '|' .. member)
  return renamed
end
`

// topLua defines refreshTop(z, u, n, top, topN, minVersion, now, force): it recomputes
// the cached top-N and bumps its version when it changed (or when force is set), and
// returns {changed, version, updated, body}.
const topLua = `
local function refreshTop(z, u, n, topKey, topN, minVersion, now, force)
  local top = redis.call('ZREVRANGE', z, 0, topN - 1, 'WITHSCORES')
  local digest = table.concat(top, ',')
  local meta = redis.call('HMGET', topKey, 'version', 'digest', 'updated', 'body')
  local curVersion = tonumber(meta[1]) or 0
  if meta[2] == digest and meta[4] and not force then
    return {0, curVersion, meta[3], meta[4]}
  end
  local lines = {}
  for k = 1, #top, 2 do
    local member, score = top[k], top[k+1]
    local user = string.sub(member, 18)
    local h = redis.call('HGET', u, user) or ''
    local _, _, upd = string.match(h, '^([^|]*)|([^|]*)|([^|]*)|')
    local nick = redis.call('HGET', n, user) or ''
    lines[#lines + 1] = user .. '\t' .. score .. '\t' .. (upd or '0') .. '\t' .. nick
  end
  local version = math.max(curVersion + 1, minVersion)
  local body = table.concat(lines, '\n')
  redis.call('HSET', topKey, 'version', version, 'digest', digest, 'updated', now, 'body', body)
  return {1, version, now, body}
end
`

// applyScript mirrors absolute entry states with a version guard (into the shadow keys
// too while a rebuild runs), then refreshes the cached top-N.
// KEYS: z, u, n, top, rebuild marker, shadow z, shadow u, shadow n.
// ARGV: topN, minVersion, now µs, count, then count × (user, score, version, updated µs, member, nick).
var applyScript = redis.NewScript(upsertLua + topLua + `
local topN, minVersion, now, count = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4])
local rebuilding = redis.call('EXISTS', KEYS[5]) == 1
local renamed = false
local i = 5
for _ = 1, count do
  local user, score, version, updated, member, nick = ARGV[i], ARGV[i+1], tonumber(ARGV[i+2]), ARGV[i+3], ARGV[i+4], ARGV[i+5]
  i = i + 6
  if upsert(KEYS[1], KEYS[2], KEYS[3], user, score, version, updated, member, nick) then renamed = true end
  if rebuilding then upsert(KEYS[6], KEYS[7], KEYS[8], user, score, version, updated, member, nick) end
end
return refreshTop(KEYS[1], KEYS[2], KEYS[3], KEYS[4], topN, minVersion, now, renamed)
`)

// loadScript writes entry states into the shadow keys of a rebuild (version-guarded, so
// newer states the projector wrote meanwhile win). KEYS: shadow z, u, n. ARGV as apply's
// entries, after the count.
var loadScript = redis.NewScript(upsertLua + `
local count = tonumber(ARGV[1])
local i = 2
for _ = 1, count do
  upsert(KEYS[1], KEYS[2], KEYS[3], ARGV[i], ARGV[i+1], tonumber(ARGV[i+2]), ARGV[i+3], ARGV[i+4], ARGV[i+5])
  i = i + 6
end
return count
`)

// swapScript replaces the live board with the shadow one in one step, ends the rebuild
// and refreshes the top with a version above every earlier one. It does nothing and
// returns {-1} unless the rebuild marker still holds the caller's token.
// KEYS: z, u, n, top, rebuild marker, shadow z, shadow u, shadow n. ARGV: topN, minVersion, now µs, token.
var swapScript = redis.NewScript(topLua + `
if redis.call('GET', KEYS[5]) ~= ARGV[4] then return {-1, 0} end
for k = 1, 3 do
  if redis.call('EXISTS', KEYS[k + 5]) == 1 then
    redis.call('RENAME', KEYS[k + 5], KEYS[k])
  else
    redis.call('DEL', KEYS[k])
  end
end
redis.call('DEL', KEYS[5])
return refreshTop(KEYS[1], KEYS[2], KEYS[3], KEYS[4], tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3], true)
`)

// userScript returns {"score|version|updated|member", zero-based rank} or nil.
var userScript = redis.NewScript(`
local h = redis.call('HGET', KEYS[2], ARGV[1])
if not h then return false end
local member = string.match(h, '^[^|]*|[^|]*|[^|]*|(.*)$')
local rank = redis.call('ZREVRANK', KEYS[1], member)
if not rank then return false end
return {h, rank}
`)
