package redis

import (
	"crypto/sha1"
	"encoding/hex"
)

// The store's Lua scripts. Each touches one key, KEYS[1], so that each runs
// atomically on the node that owns the key, standalone or in a Cluster. The
// field names are those of doc.go; the scripts never read the server's
// clock: "now" comes from the caller, in ARGV.
//
// A key that holds something other than a hash is never overwritten: the
// claim script reports its type, and the fenced scripts treat it as a record
// not held under the caller's token.

// acquireScript claims KEYS[1] unless a live record holds it.
//
//	ARGV[1]     now, epoch milliseconds, rounded down
//	ARGV[2]     when the server deletes the key (PEXPIREAT), epoch ms
//	ARGV[3]     the new record's expiration, epoch seconds
//	ARGV[4]     the new record's token
//	ARGV[5]     the new record's lease end (in_progress_expiration), epoch
//	            ms, or "" for none
//	ARGV[6...]  the new record's other fields, as field, value pairs
//
// The record it writes has the status INPROGRESS.
//
// It returns the integer 1 when it wrote the record over none (or over an
// expired one); "L" and the record it replaced, packed as below, when it
// wrote the record over an in-progress one whose lease had lapsed (a
// takeover, which the guard counts); "T" and the key's type for a key of
// another type than a hash; and otherwise the existing record (see
// packedFields), "R" and each of the record's fields in a fixed order, as
// "-" when the hash lacks it or as its length in bytes, ":" and its value:
// a live record, or one the script cannot read (missing or non-numeric
// expiration, unknown status), which stays in place and which the caller
// decodes and reports as corrupt. One string, so that a replay's reply is
// one value to read, not a list of field names and values.
//
// Live is store.Record.Live on the stored numbers: expiration (seconds,
// rounded up when written) > now (in seconds, rounded down), and
// COMPLETED, or INPROGRESS without a lease, or with a lease (milliseconds,
// rounded up) > now. Lapsed is INPROGRESS, not expired, and a lease ≤ now.
const acquireLua = `
local function pack(tag, f)
  local out = {tag}
  for i = 1, 9 do
    if f[i] then
      out[#out + 1] = #f[i] .. ':'
      out[#out + 1] = f[i]
    else
      out[#out + 1] = '-'
    end
  end
  return table.concat(out)
end
local now = tonumber(ARGV[1])
local t = redis.call('TYPE', KEYS[1]).ok
local lapsed
if t ~= 'none' then
  if t ~= 'hash' then
    return 'T' .. t
  end
  local f = redis.call('HMGET', KEYS[1], 'status', 'expiration', 'in_progress_expiration',
    'token', 'validation', 'result_kind', 'data_encoding', 'data', 'format')
  local exp = tonumber(f[2])
  local live = true
  if exp ~= nil and (f[1] == 'COMPLETED' or f[1] == 'INPROGRESS') then
    live = exp > math.floor(now / 1000)
    if live and f[1] == 'INPROGRESS' and f[3] then
      local lease = tonumber(f[3])
      if lease ~= nil and lease <= now then
        live = false
        lapsed = f
      end
    end
  end
  if live then
    return pack('R', f)
  end
  redis.call('DEL', KEYS[1])
end
redis.call('HSET', KEYS[1], 'status', 'INPROGRESS', 'expiration', ARGV[3], 'token', ARGV[4], unpack(ARGV, 6))
if ARGV[5] ~= '' then
  redis.call('HSET', KEYS[1], 'in_progress_expiration', ARGV[5])
end
redis.call('PEXPIREAT', KEYS[1], ARGV[2])
if lapsed then
  return pack('L', lapsed)
end
return 1
`

// packedFields are the fields of a record as the claim script returns it,
// in order.
var packedFields = [...]string{fieldStatus, fieldExpiry, fieldLease, fieldToken, fieldValidation, fieldResultKind, fieldEncoding, fieldData, fieldFormat}

// heldPrelude ends a fenced script with 0 unless KEYS[1] is a hash held
// under the token ARGV[1].
const heldPrelude = `
if redis.call('TYPE', KEYS[1]).ok ~= 'hash' then
  return 0
end
if redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] then
  return 0
end
`

// completeScript replaces the record KEYS[1] if it is held under ARGV[1].
//
//	ARGV[1]     the token, which the completed record keeps
//	ARGV[2]     PEXPIREAT, epoch ms
//	ARGV[3]     the completed record's expiration, epoch seconds
//	ARGV[4...]  the completed record's other fields, as field, value pairs
//
// The record it writes has the status COMPLETED. It then publishes
// "COMPLETED" on the shard channel named as the key (see Publishing).
//
// It returns 1 when it wrote, 0 when the key is absent, not a hash, or held
// under another token.
const completeLua = heldPrelude + `
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'status', 'COMPLETED', 'expiration', ARGV[3], 'token', ARGV[1], unpack(ARGV, 4))
redis.call('PEXPIREAT', KEYS[1], ARGV[2])
redis.pcall('SPUBLISH', KEYS[1], 'COMPLETED')
return 1
`

// Publishing. The scripts that complete or release a record end with an
// SPUBLISH of what happened ("COMPLETED", "RELEASED") on the shard
// channel named as the record's key, KEYS[1], for the store's watchers
// (Store.Watch). The channel is the key's own name, so it hashes to the
// key's slot, and a Cluster node publishes it to its own shard alone. The
// script has written by then and runs atomically: a subscriber that reads
// the record after the message sees the write. SPUBLISH to a channel
// nobody subscribes to is a lookup. Through redis.pcall, a server without
// sharded pub/sub (before Redis 7.0) or an ACL user denied the channel
// publishes nothing and the script still succeeds; Watch then fails, and
// waiters poll.

// extendScript moves the lease and expiry of the in-progress record KEYS[1]
// if it is held under ARGV[1].
//
//	ARGV[1]  the token
//	ARGV[2]  PEXPIREAT, epoch ms
//	ARGV[3]  the new expiration, epoch seconds
//	ARGV[4]  the new in_progress_expiration, epoch ms, or "" for none
//
// It returns 1 when it wrote, 0 otherwise.
const extendLua = heldPrelude + `
if redis.call('HGET', KEYS[1], 'status') ~= 'INPROGRESS' then
  return 0
end
redis.call('HSET', KEYS[1], 'expiration', ARGV[3])
if ARGV[4] == '' then
  redis.call('HDEL', KEYS[1], 'in_progress_expiration')
else
  redis.call('HSET', KEYS[1], 'in_progress_expiration', ARGV[4])
end
redis.call('PEXPIREAT', KEYS[1], ARGV[2])
return 1
`

// releaseScript deletes the record KEYS[1] if it is in progress under
// ARGV[1], and then publishes "RELEASED" (see Publishing). It returns 1
// when it deleted, 0 otherwise.
const releaseLua = heldPrelude + `
if redis.call('HGET', KEYS[1], 'status') ~= 'INPROGRESS' then
  return 0
end
redis.call('DEL', KEYS[1])
redis.pcall('SPUBLISH', KEYS[1], 'RELEASED')
return 1
`

// script is one of the store's scripts: its source and the SHA-1 EVALSHA
// names it by, boxed once as the argument go-redis writes.
type script struct {
	src string
	sha any
}

func newScript(src string) *script {
	sum := sha1.Sum([]byte(src))
	return &script{src: src, sha: hex.EncodeToString(sum[:])}
}

var (
	acquireScript  = newScript(acquireLua)
	completeScript = newScript(completeLua)
	extendScript   = newScript(extendLua)
	releaseScript  = newScript(releaseLua)

	// allSources are the scripts' sources, for SCRIPT LOAD.
	allSources = []string{acquireLua, completeLua, extendLua, releaseLua}
)

// Scripts returns the Lua source of each of the store's scripts, by name:
// "acquire", "complete", "extend" and "release". The store runs them with
// EVALSHA (the SHA-1 of the source, as redis.NewScript computes it) and
// EVAL when the server lacks one. What each script expects and returns is
// documented in the source; the layout they write is the package's.
//
// For audits, for loading the scripts ahead of time (SCRIPT LOAD) where the
// application's ACL user may not, and for sending the store's commands by
// hand, as the load benchmark's raw baseline does (bench/load). The map is
// a fresh copy.
func Scripts() map[string]string {
	return map[string]string{
		"acquire":  acquireLua,
		"complete": completeLua,
		"extend":   extendLua,
		"release":  releaseLua,
	}
}
