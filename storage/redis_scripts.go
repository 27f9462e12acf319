package storage

import "github.com/redis/go-redis/v9"

// The Lua scripts of the Redis mirror. Each runs atomically on the keys of one board (one
// hash tag, so one cluster slot); see redis.go for the key layout. The scripts find the
// buckets of the entry hashes themselves, keys their callers do not name: Redis (Cluster
// too) lets a script reach keys of the slot its named keys are in, which the cluster test
// exercises.

// entryReadLua defines the entry hashes of a board period: user -> record (record.go),
// spread over buckets by linear hashing so that each stays small enough for Redis's compact
// listpack encoding (hash-max-listpack-entries, 128 by default). Bucket 0 is the key u
// itself, bucket i > 0 is u:i; field "" of bucket 0 (never a user id) holds the state
// "level|split|deadline ms". A user's bucket is h mod 2^level, or h mod 2^(level+1) when
// that is below split (h: the user id's bytes as a polynomial in 131 modulo the prime
// 4294967291). When a new entry takes the board past bucketLoad entries per bucket, grow
// moves the entries of bucket split that belong to split + 2^level there, and split moves
// on; a small board keeps one bucket, and a load sizes empty hashes for what it brings
// (presize). Every bucket lives until at least the deadline (0: no lifetime set); see
// expire. Reads need only entryReadLua; entryHashesLua adds what writes need.
const entryReadLua = `
local function userHash(user)
  local h, bytes = 0, {string.byte(user, 1, -1)}
  for i = 1, #bytes do h = (h * 131 + bytes[i]) % 4294967291 end
  return h
end
local function hashes(u)
  local o = {u = u, level = 0, split = 0, deadline = 0, touched = {}}
  local st = redis.call('HGET', u, '')
  if st then
    local l, s, d = string.match(st, '^(%d+)|(%d+)|(%d+)$')
    o.level, o.split, o.deadline = tonumber(l), tonumber(s), tonumber(d)
  end
  return o
end
local function bucketKey(o, i)
  if i == 0 then return o.u end
  return o.u .. ':' .. i
end
local function bucketIndex(o, h)
  local i = h % (2 ^ o.level)
  if i < o.split then i = h % (2 ^ (o.level + 1)) end
  return i
end
local function bucketOf(o, user) return bucketKey(o, bucketIndex(o, userHash(user))) end
local function recMember(rec, user) return string.sub(rec, 1, 8) .. user end
`

// entryHashesLua is entryReadLua with what writes to the entry hashes need.
const entryHashesLua = entryReadLua + `
local bucketLoad = 40
local function saveHashes(o)
  redis.call('HSET', o.u, '', o.level .. '|' .. o.split .. '|' .. string.format('%d', o.deadline))
end
local function bucketCount(o) return 2 ^ o.level + o.split end
-- presize gives empty entry hashes the buckets n entries need, so that a load splits none.
local function presize(o, n)
  if n <= bucketLoad or redis.call('EXISTS', o.u) == 1 then return end
  local buckets = math.ceil(n / bucketLoad)
  o.level = math.floor(math.log(buckets) / math.log(2) + 1e-9)
  o.split = buckets - 2 ^ o.level
  saveHashes(o)
end
-- grow splits one bucket when the board holds more than bucketLoad entries per bucket.
local function grow(o, entries)
  if entries <= bucketLoad * bucketCount(o) then return end
  local from, to = bucketKey(o, o.split), bucketKey(o, o.split + 2 ^ o.level)
  local all = redis.call('HGETALL', from)
  local moved, names = {}, {}
  for k = 1, #all, 2 do
    if all[k] ~= '' and userHash(all[k]) % (2 ^ (o.level + 1)) ~= o.split then
      moved[#moved + 1] = all[k]
      moved[#moved + 1] = all[k + 1]
      names[#names + 1] = all[k]
    end
  end
  if #names > 0 then
    redis.call('HSET', to, unpack(moved))
    redis.call('HDEL', from, unpack(names))
    o.touched[to] = true
  end
  o.split = o.split + 1
  if o.split == 2 ^ o.level then
    o.level, o.split = o.level + 1, 0
  end
  saveHashes(o)
end
-- recVersion reads the version of a record (a uvarint after the 8-byte member prefix).
local function recVersion(rec)
  local v, mult = 0, 1
  for i = 9, #rec do
    local b = string.byte(rec, i)
    if b < 128 then return v + b * mult end
    v, mult = v + (b - 128) * mult, mult * 128
  end
  return v
end
local function hex(s)
  return string.format(string.rep('%02x', #s), string.byte(s, 1, -1))
end
`

// upsertLua defines upsert(z, o, n, m, user, rec, sortkey, version, nick, meta): the
// version-guarded write of one absolute entry state (o: the entry hashes). It returns
// whether it wrote the entry, and whether it wrote something new about the user (a nick
// name or metadata) that a top showing the user would show. A state without a record is
// an entry that is gone (its user banned, or removed by an admin): the entry is deleted
// unless Redis holds a newer version. When o.gone names a hash of removals (user ->
// version), a removal is also written there for goneTTL (burial), and a state it finds no
// entry for is written only if it is newer than the user's removal: a load that read the
// entry from PostgreSQL before it was removed, or a write delayed past its removal, does
// not bring the entry back.
const upsertLua = `
local goneTTL = 600000
local function bury(o, user, version)
  if not o.gone then return end
  local v = tonumber(redis.call('HGET', o.gone, user))
  if not v or v < version then redis.call('HSET', o.gone, user, version) end
  redis.call('PEXPIRE', o.gone, goneTTL)
  o.goneHeld = true
end
local function buried(o, user, version)
  if not o.gone then return false end
  if o.goneHeld == nil then o.goneHeld = redis.call('EXISTS', o.gone) == 1 end
  if not o.goneHeld then return false end
  local v = tonumber(redis.call('HGET', o.gone, user))
  return v ~= nil and v >= version
end
-- ranked notes in o.topTouched whether member is within the first o.topN ranks (o.topN
-- set: the caller asks, see applyScript).
local function ranked(o, z, member)
  if not o.topN or o.topTouched then return end
  local r = redis.call('ZREVRANK', z, member)
  if r ~= false and r ~= nil and r < o.topN then o.topTouched = true end
end
local function upsert(z, o, n, m, user, rec, sortkey, version, nick, meta)
  local u = bucketOf(o, user)
  local cur = redis.call('HGET', u, user)
  if rec == '' then
    bury(o, user, version)
    if not cur or recVersion(cur) >= version then return false, false end
    ranked(o, z, recMember(cur, user))
    redis.call('ZREM', z, recMember(cur, user))
    redis.call('HDEL', u, user)
    redis.call('HDEL', n, user)
    redis.call('HDEL', m, user)
    return true, false
  end
  if not cur and buried(o, user, version) then return false, false end
  local renamed = false
  if nick ~= '' and redis.call('HGET', n, user) ~= nick then
    redis.call('HSET', n, user, nick)
    renamed = true
  end
  local member = recMember(rec, user)
  if cur then
    local cm = recMember(cur, user)
    if recVersion(cur) >= version then
      if renamed then ranked(o, z, cm) end
      return false, renamed
    end
    ranked(o, z, cm)
    if cm ~= member then
      redis.call('ZREM', z, cm)
    end
  end
  redis.call('ZADD', z, sortkey, member)
  ranked(o, z, member)
  redis.call('HSET', u, user, rec)
  o.touched[u] = true
  -- Whether m holds any metadata is read once a script (o.metaHeld): on a board whose
  -- entries carry none, an entry without metadata has none to delete.
  if o.metaHeld == nil then o.metaHeld = redis.call('EXISTS', m) == 1 end
  if meta == '' then
    if o.metaHeld and redis.call('HDEL', m, user) == 1 then renamed = true end
  elseif redis.call('HGET', m, user) ~= meta then
    redis.call('HSET', m, user, meta)
    o.metaHeld, renamed = true, true
  end
  if not cur then grow(o, redis.call('ZCARD', z)) end
  return true, renamed
end
`

// topLua defines refreshTop(z, o, n, m, top, ver, topN, now, force, written): it
// recomputes the cached top-N and, when its members or their order changed (or force says
// so: true, or a set of users of whom one is in the top: their entry, nick name or
// metadata changed, which a line shows even when the top's members and scores stay the
// same, e.g. a set to the same value, whose updated_at moves), gives it the next version of the board (nextVersion). It returns {changed,
// version, updated, body}, the body empty when nothing changed; a body line is user TAB
// sort key TAB record (hex) TAB nick TAB metadata. written, when not nil, is the set of users whose
// entry, nick name or metadata the caller may have written since the cached body was
// computed: the body's lines of the other users are kept as they are, so a refresh reads
// and formats only what changed (only apply writes the entries of a loaded board, and it
// names every user it writes). nil recomputes every line.
const topLua = `
-- nextVersion draws a top version from the board-wide counter ver (so versions rise
-- across periods too), never below the current one, nor below Redis's clock in µs: a
-- board whose keys Redis lost, counter included, starts again above every version it gave
-- before (unless it gave more than a million a second, or the clock went back).
local function nextVersion(ver, curVersion)
  local t = redis.call('TIME')
  local version = string.format('%d', math.max(redis.call('INCR', ver), curVersion + 1, t[1] * 1000000 + t[2]))
  redis.call('SET', ver, version, 'KEEPTTL')
  return version
end

local function refreshTop(z, o, n, m, topKey, ver, topN, now, force, written)
  local top = redis.call('ZREVRANGE', z, 0, topN - 1, 'WITHSCORES')
  local digest = table.concat(top, ',')
  local meta = redis.call('HMGET', topKey, 'version', 'digest', 'updated')
  local curVersion = tonumber(meta[1]) or 0
  if type(force) == 'table' then
    local named = false
    for k = 1, #top, 2 do
      if force[string.sub(top[k], 9)] then named = true end
    end
    force = named
  end
  -- The digest and the body are written together: the body is read only to be rewritten.
  if meta[2] == digest and not force then
    return {0, curVersion, meta[3] or '0', ''}
  end
  local kept = {}
  local old = written and redis.call('HGET', topKey, 'body')
  if old then
    for line in string.gmatch(old, '[^\n]+') do
      local user = string.match(line, '^([^\t]*)\t')
      if user and not written[user] then kept[user] = line end
    end
  end
  local lines = {}
  for k = 1, #top, 2 do
    local user = string.sub(top[k], 9)
    if kept[user] then
      lines[#lines + 1] = kept[user]
    else
      local rec = redis.call('HGET', bucketOf(o, user), user) or ''
      local nick = redis.call('HGET', n, user) or ''
      local md = redis.call('HGET', m, user) or ''
      lines[#lines + 1] = user .. '\t' .. top[k + 1] .. '\t' .. hex(rec) .. '\t' .. nick .. '\t' .. md
    end
  end
  local body = table.concat(lines, '\n')
  local version = nextVersion(ver, curVersion)
  redis.call('HSET', topKey, 'version', version, 'digest', digest, 'updated', now, 'body', body)
  return {1, tonumber(version), now, body}
end
`

// expireLua defines expire(o, others, topKey, ver, ttl, now, sweep): a period's keys live
// ttl ms after the last write (0: forever), all of them until one deadline (o.deadline), so
// that no key of a period outlives another: a sorted set outliving entry hashes would keep
// members a load finds no record for, and cannot remove. Every bucket and the keys in others
// (z, n, m) get a new deadline a ttl away when sweep is set, when the board has few buckets,
// or when the deadline is less than half a ttl away: a big board does not touch each of its
// buckets on every write, and lives between half a ttl and a ttl after its last write.
// Otherwise the buckets written (a new one, say) get the deadline there is. The top, whose
// presence marks a loaded period, goes a second before the deadline, so no reader sees a
// top over missing entries. The board's version counter ver lives as long as the
// longest-lived of its periods, so a board whose periods all expire (a finished match)
// leaves nothing behind; versions still rise after that, as they are never below Redis's
// clock (nextVersion). now is in µs.
const expireLua = `
local function expire(o, others, topKey, ver, ttl, now, sweep)
  if ttl <= 0 then return end
  now = math.floor(now / 1000)
  if sweep or bucketCount(o) <= 8 or o.deadline - now < ttl / 2 then
    o.deadline = now + ttl
    saveHashes(o)
    for i = 0, bucketCount(o) - 1 do redis.call('PEXPIRE', bucketKey(o, i), ttl) end
  else
    for k in pairs(o.touched) do redis.call('PEXPIRE', k, o.deadline - now) end
  end
  for _, k in ipairs(others) do redis.call('PEXPIRE', k, o.deadline - now) end
  redis.call('PEXPIRE', topKey, math.max(math.min(o.deadline - now, ttl) - 1000, 1))
  if redis.call('PTTL', ver) < ttl then redis.call('PEXPIRE', ver, ttl) end
end
`

// applyScript mirrors absolute entry states with a version guard (into the shadow keys
// too while a rebuild runs); when it wrote anything that may touch the top (for one or two
// entries, told by their ranks before and after) it refreshes the cached top-N, which gets
// a new version if its members, their order or what it shows of them changed, and
// otherwise it answers the top's version and time without its body. When the board
// is not loaded (no top) it writes the shadow keys of a running rebuild (which may have
// read the entries before these states were committed, and will replace whatever the live
// keys hold) and the removals among the states into the live keys (a load may be writing
// them), and returns {-2}: the caller loads the board from PostgreSQL. Removals are buried
// (upsertLua) in the live keys and the shadow's. While a load on demand (its hash of loads
// exists) or a rebuild (its marker) is under way, the new nick names of users the batch
// renamed are noted in the period's renames (user -> nick name): a page read from
// PostgreSQL before such a name was committed takes it from there, and so does a load's
// seal, for names applied to a period not loaded yet (which this script leaves alone);
// the old name would otherwise stay in Redis for good.
// KEYS: z, u, n, m, top, rebuild marker, shadow z, u, n, m, ver, removals, shadow removals,
// loads under way, renames.
// ARGV: topN, now µs, ttl ms, count, then count × (user, record, sortkey, version, nick,
// metadata), then how many users the states rename and as many (user, new nick name).
var applyScript = redis.NewScript(entryHashesLua + upsertLua + topLua + expireLua + `
local topN, now, ttl, count = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local renamedAt = 5 + 6 * count
if tonumber(ARGV[renamedAt]) > 0 and redis.call('EXISTS', KEYS[14], KEYS[6]) > 0 then
  for i = renamedAt + 1, renamedAt + 2 * tonumber(ARGV[renamedAt]), 2 do
    redis.call('HSET', KEYS[15], ARGV[i], ARGV[i+1])
  end
  redis.call('PEXPIRE', KEYS[15], 600000)
end
local shadow
if redis.call('EXISTS', KEYS[6]) == 1 then
  shadow = hashes(KEYS[8])
  shadow.gone = KEYS[13]
end
local live = hashes(KEYS[2])
live.gone = KEYS[12]
-- Whether the top may have changed: for one or two entries, a rank before and after each
-- costs less than reading the top; for more, the top is read once (refreshTop).
if count <= 2 then live.topN = topN end
if redis.call('EXISTS', KEYS[5]) == 0 then
  for i = 5, 4 + 6 * count, 6 do
    if ARGV[i+1] == '' then
      upsert(KEYS[1], live, KEYS[3], KEYS[4], ARGV[i], ARGV[i+1], ARGV[i+2], tonumber(ARGV[i+3]), ARGV[i+4], ARGV[i+5])
    end
    if shadow then
      upsert(KEYS[7], shadow, KEYS[9], KEYS[10], ARGV[i], ARGV[i+1], ARGV[i+2], tonumber(ARGV[i+3]), ARGV[i+4], ARGV[i+5])
    end
  end
  return {-2}
end
local wrote, shown, written = false, {}, {}
local i = 5
for _ = 1, count do
  local user, rec, sortkey, version, nick, meta = ARGV[i], ARGV[i+1], ARGV[i+2], tonumber(ARGV[i+3]), ARGV[i+4], ARGV[i+5]
  i = i + 6
  written[user] = true
  local changed, named = upsert(KEYS[1], live, KEYS[3], KEYS[4], user, rec, sortkey, version, nick, meta)
  if changed or named then
    wrote = true
    shown[user] = true
  end
  if shadow then upsert(KEYS[7], shadow, KEYS[9], KEYS[10], user, rec, sortkey, version, nick, meta) end
end
expire(live, {KEYS[1], KEYS[3], KEYS[4]}, KEYS[5], KEYS[11], ttl, tonumber(now), false)
if not wrote or (live.topN and not live.topTouched) then
  local meta = redis.call('HMGET', KEYS[5], 'version', 'updated')
  return {0, tonumber(meta[1]) or 0, meta[2] or '0', ''}
end
-- refreshTop tells from the top itself whether it changed.
return refreshTop(KEYS[1], live, KEYS[3], KEYS[4], KEYS[5], KEYS[11], topN, now, shown, written)
`)

// loadScript writes entry states (version-guarded, so newer states the projector wrote
// meanwhile win) into a board's keys: the live ones when loading on demand, the shadow
// ones during a rebuild; an entry buried meanwhile (removed after the load read it) stays
// out. Given a ttl (the first page of a load on demand), it first gives every key the
// period has left a new deadline a ttl away (expireLua): keys about to expire would
// otherwise vanish between the load's pages and its seal, which would then mark a board
// loaded with entries missing. Given a token (a load on demand), it counts the load's pages
// in the hash of loads under way (token -> pages written), and a page writes nothing and
// answers -1 unless the count says every page before it is there: Redis that lost the
// keys, or came back with an older copy of them (a restart from its append-only file, a
// failover), lost the count with the pages, as a script's writes go to the file and the
// replicas together; the first page too finds the count its load began with (beginLoad),
// before it read anything. A page writes the nick name noted in the period's renames
// (applyScript) over the one it read. KEYS: z, u, n, m, removals, top, ver, loads under
// way (the last three used by a load on demand only: a rebuild passes no ttl and no
// token), renames. ARGV: count,
// the number of entries the whole load brings (to size empty entry hashes), ttl ms (0:
// none), now µs, token (empty for a rebuild's shadow), the page's number from 0, then
// entries as apply's.
var loadScript = redis.NewScript(entryHashesLua + upsertLua + expireLua + `
local count, ttl, token = tonumber(ARGV[1]), tonumber(ARGV[3]), ARGV[5]
if token ~= '' then
  local page = tonumber(ARGV[6])
  if tonumber(redis.call('HGET', KEYS[8], token) or '-1') ~= page then return -1 end
  redis.call('HSET', KEYS[8], token, page + 1)
  redis.call('PEXPIRE', KEYS[8], 600000)
end
local renames = KEYS[9] ~= nil and redis.call('PEXPIRE', KEYS[9], 600000) == 1
local o = hashes(KEYS[2])
o.gone = KEYS[5]
if ttl > 0 and redis.call('EXISTS', KEYS[1], KEYS[2]) > 0 then
  expire(o, {KEYS[1], KEYS[3], KEYS[4]}, KEYS[6], KEYS[7], ttl, tonumber(ARGV[4]), true)
end
presize(o, tonumber(ARGV[2]))
local i = 7
for _ = 1, count do
  local nick = ARGV[i+4]
  if renames then nick = redis.call('HGET', KEYS[9], ARGV[i]) or nick end
  upsert(KEYS[1], o, KEYS[3], KEYS[4], ARGV[i], ARGV[i+1], ARGV[i+2], tonumber(ARGV[i+3]), nick, ARGV[i+5])
  i = i + 6
end
return count
`)

// beginLoadScript begins a load on demand before it reads its first page: the token's
// count of pages at 0 in the hash of loads under way (loadScript), which also has the
// projector note the nick names it applies meanwhile (applyScript). When no other load is
// under way, the renames noted for earlier ones go: PostgreSQL, read from now on, has them.
// KEYS: loads under way, renames, rebuild marker. ARGV: token.
var beginLoadScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1], KEYS[3]) == 0 then redis.call('DEL', KEYS[2]) end
redis.call('HSET', KEYS[1], ARGV[1], 0)
redis.call('PEXPIRE', KEYS[1], 600000)
return 1
`)

// endLoadScript takes a failed load on demand out of the loads under way (and the
// renames noted for them once none is left): with its token left there, the projector
// would go on noting renames for it until the hash expired. KEYS: loads under way,
// renames, rebuild marker. ARGV: token.
var endLoadScript = redis.NewScript(`
redis.call('HDEL', KEYS[1], ARGV[1])
if redis.call('EXISTS', KEYS[1], KEYS[3]) == 0 then redis.call('DEL', KEYS[2]) end
return 1
`)

// sealScript ends a load on demand: unless Redis lost pages of the load (its count of
// them is not the load's) it takes the token out of the loads under way, writes the nick
// names noted in the period's renames meanwhile (applyScript) of the users it holds an
// entry of (the renames go once no load is under way), computes the top (which marks the
// board loaded) with a new version and sets the keys' lifetime; else it answers {-1}.
// KEYS: z, u, n, m, top, ver, loads under way, renames, rebuild marker. ARGV: topN, now
// µs, ttl ms, token, the pages the load wrote.
var sealScript = redis.NewScript(entryHashesLua + topLua + expireLua + `
if tonumber(redis.call('HGET', KEYS[7], ARGV[4]) or '-1') ~= tonumber(ARGV[5]) then return {-1} end
redis.call('HDEL', KEYS[7], ARGV[4])
local o = hashes(KEYS[2])
local renamed = redis.call('HGETALL', KEYS[8])
for k = 1, #renamed, 2 do
  if redis.call('HEXISTS', bucketOf(o, renamed[k]), renamed[k]) == 1 then redis.call('HSET', KEYS[3], renamed[k], renamed[k + 1]) end
end
if redis.call('EXISTS', KEYS[7], KEYS[9]) == 0 then redis.call('DEL', KEYS[8]) end
local res = refreshTop(KEYS[1], o, KEYS[3], KEYS[4], KEYS[5], KEYS[6], tonumber(ARGV[1]), ARGV[2], true)
expire(o, {KEYS[1], KEYS[3], KEYS[4]}, KEYS[5], KEYS[6], tonumber(ARGV[3]), tonumber(ARGV[2]), true)
return res
`)

// dropScript deletes a board period's entries: its sorted set, every bucket of its entry
// hashes, its nick names and metadata. KEYS: z, u, n, m.
var dropScript = redis.NewScript(entryHashesLua + `
local o = hashes(KEYS[2])
for i = 1, bucketCount(o) - 1 do redis.call('DEL', bucketKey(o, i)) end
return redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4])
`)

// swapScript replaces the live board with the shadow one in one step, ends the rebuild
// and refreshes the top with a new version. It does nothing and returns {-1} unless the
// rebuild marker still holds the caller's token.
// Unless a load is under way, the renames noted during the rebuild go with the marker.
// KEYS: z, u, n, m, top, rebuild marker, shadow z, u, n, m, ver, loads under way, renames.
// ARGV: topN, now µs, token, ttl ms.
var swapScript = redis.NewScript(entryHashesLua + topLua + expireLua + `
if redis.call('GET', KEYS[6]) ~= ARGV[3] then return {-1, 0} end
for _, k in ipairs({1, 3, 4}) do
  if redis.call('EXISTS', KEYS[k + 6]) == 1 then
    redis.call('RENAME', KEYS[k + 6], KEYS[k])
  else
    redis.call('DEL', KEYS[k])
  end
end
local live, shadow = hashes(KEYS[2]), hashes(KEYS[8])
local nl, ns = bucketCount(live), bucketCount(shadow)
for i = 0, math.max(nl, ns) - 1 do
  local from, to = bucketKey(shadow, i), bucketKey(live, i)
  if i < ns and redis.call('EXISTS', from) == 1 then
    redis.call('RENAME', from, to)
  else
    redis.call('DEL', to)
  end
end
redis.call('DEL', KEYS[6])
if redis.call('EXISTS', KEYS[12]) == 0 then redis.call('DEL', KEYS[13]) end
local o = hashes(KEYS[2])
local res = refreshTop(KEYS[1], o, KEYS[3], KEYS[4], KEYS[5], KEYS[11], tonumber(ARGV[1]), ARGV[2], true)
expire(o, {KEYS[1], KEYS[3], KEYS[4]}, KEYS[5], KEYS[11], tonumber(ARGV[4]), tonumber(ARGV[2]), true)
return res
`)

// userScript returns {record, zero-based rank, metadata, sort key}, false when the user has
// no entry, or -1 when the board is not loaded.
// KEYS: z, u, m, top.
var userScript = redis.NewScript(entryReadLua + `
if redis.call('EXISTS', KEYS[4]) == 0 then return -1 end
local rec = redis.call('HGET', bucketOf(hashes(KEYS[2]), ARGV[1]), ARGV[1])
if not rec then return false end
local member = recMember(rec, ARGV[1])
local rank = redis.call('ZREVRANK', KEYS[1], member)
if not rank then return false end
return {rec, rank, redis.call('HGET', KEYS[3], ARGV[1]) or '', redis.call('ZSCORE', KEYS[1], member)}
`)

// recordsScript returns, for each user in ARGV, its record and sort key (two empty
// strings when it has no entry). It reads whatever is there, loaded or not. KEYS: z, u and,
// for the write path's value reads, held: a user held there (Boards.Hold) reads as having
// no entry.
var recordsScript = redis.NewScript(entryReadLua + `
local o = hashes(KEYS[2])
local out = {}
local held = KEYS[3] and redis.call('EXISTS', KEYS[3]) == 1 -- mostly not: one call a script
for _, user in ipairs(ARGV) do
  local rec = redis.call('HGET', bucketOf(o, user), user)
  if rec and held and redis.call('HEXISTS', KEYS[3], user) == 1 then rec = nil end
  local score = rec and redis.call('ZSCORE', KEYS[1], recMember(rec, user))
  out[#out + 1] = rec or ''
  out[#out + 1] = score or ''
end
return out
`)

// checkScript returns, for each user in ARGV, its record, sort key, nick name and
// metadata (empty strings where Redis holds none), for CheckConsistency. KEYS: z, u, n, m.
var checkScript = redis.NewScript(entryReadLua + `
local o = hashes(KEYS[2])
local out = {}
for _, user in ipairs(ARGV) do
  local rec = redis.call('HGET', bucketOf(o, user), user)
  local score = rec and redis.call('ZSCORE', KEYS[1], recMember(rec, user))
  out[#out + 1] = rec or ''
  out[#out + 1] = score or ''
  out[#out + 1] = redis.call('HGET', KEYS[3], user) or ''
  out[#out + 1] = redis.call('HGET', KEYS[4], user) or ''
end
return out
`)

// entriesLua defines entries(o, n, m, list): for members returned WITHSCORES, the flat
// array member, sort key, record, nick name, metadata of each.
const entriesLua = `
local function entries(o, n, m, list)
  local out = {}
  for k = 1, #list, 2 do
    local user = string.sub(list[k], 9)
    out[#out + 1] = list[k]
    out[#out + 1] = list[k + 1]
    out[#out + 1] = redis.call('HGET', bucketOf(o, user), user) or ''
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
var pageScript = redis.NewScript(entryReadLua + entriesLua + `
if redis.call('EXISTS', KEYS[5]) == 0 then return -1 end
local size, start = tonumber(ARGV[1]), 0
if ARGV[2] == '1' then
  local old = redis.call('ZSCORE', KEYS[1], ARGV[4])
  redis.call('ZADD', KEYS[1], ARGV[3], ARGV[4])
  start = redis.call('ZREVRANK', KEYS[1], ARGV[4])
  -- The page starts after every entry ranked at or above the cursor's position: the
  -- cursor's own entry counts only if it is (still) there, not moved below it.
  if old then
    redis.call('ZADD', KEYS[1], old, ARGV[4])
    if tonumber(old) >= tonumber(ARGV[3]) then start = start + 1 end
  else
    redis.call('ZREM', KEYS[1], ARGV[4])
  end
end
return {start, entries(hashes(KEYS[2]), KEYS[3], KEYS[4], redis.call('ZREVRANGE', KEYS[1], start, start + size - 1, 'WITHSCORES'))}
`)

// aroundScript returns the entries from n places above a user to n below, in rank order:
// {first rank (0-based), entries, the user's rank}; false when the user has no entry, -1
// when the board is not loaded. KEYS: z, u, n, m, top. ARGV: user, n.
var aroundScript = redis.NewScript(entryReadLua + entriesLua + `
if redis.call('EXISTS', KEYS[5]) == 0 then return -1 end
local o = hashes(KEYS[2])
local rec = redis.call('HGET', bucketOf(o, ARGV[1]), ARGV[1])
if not rec then return false end
local rank = redis.call('ZREVRANK', KEYS[1], recMember(rec, ARGV[1]))
if not rank then return false end
local from = math.max(0, rank - tonumber(ARGV[2]))
return {from, entries(o, KEYS[3], KEYS[4], redis.call('ZREVRANGE', KEYS[1], from, rank + tonumber(ARGV[2]), 'WITHSCORES')), rank}
`)

// usersScript returns the entries of the given users that have one: a flat array of rank
// (0-based) followed by the entry fields, for each; -1 when the board is not loaded.
// KEYS: z, u, n, m, top. ARGV: user ids.
var usersScript = redis.NewScript(entryReadLua + entriesLua + `
if redis.call('EXISTS', KEYS[5]) == 0 then return -1 end
local o = hashes(KEYS[2])
local out = {}
for _, user in ipairs(ARGV) do
  local rec = redis.call('HGET', bucketOf(o, user), user)
  if rec then
    local member = recMember(rec, user)
    local rank = redis.call('ZREVRANK', KEYS[1], member)
    local score = redis.call('ZSCORE', KEYS[1], member)
    if rank then
      out[#out + 1] = rank
      for _, v in ipairs(entries(o, KEYS[3], KEYS[4], {member, score})) do out[#out + 1] = v end
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
