package catalog

// Waiters is how many Lookups joined the catalogue read of a queue in
// flight, for a test that must know they wait before it lets the read end.
func Waiters(c *Cache, tenant, queue string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if f := c.fills[key{tenant, queue}]; f != nil {
		return f.waiters
	}
	return 0
}
