package redis

// What the external tests check against, unexported in the package.
const DefaultCompressAbove = defaultCompressAbove

type ReplicationError = replicationError
