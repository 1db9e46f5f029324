// The shard's scheduler: when each entry is looked at next (its due queue), one pass over what is
// due, and a reload put in force.
extension StoreShard {
    /// When the entry in `slot` needs looking at next: a refresh falling due while it is read, the
    /// moment it turns idle, or, once idle, the moment it can be forgotten.
    func nextCheck(_ entry: CacheEntry, kind: String, now: MonotonicInstant) -> MonotonicInstant {
        let policy = runtime.policy(for: kind)
        let idleAt = entry.lastRead + policy.idleTimeout + 0.001
        if now < idleAt {
            guard entry.token.isHeld else { return idleAt }
            let next = min(idleAt, max(entry.refreshAt, entry.retryAfter, entry.rejectedUntil))
            // Also when it stops being servable: then it leaves shared memory.
            let unservableAt = entry.expiry - policy.servingFloor + 0.001
            return unservableAt > now ? min(next, unservableAt) : next
        }
        let unservableAt = !entry.token.isHeld ? now : entry.expiry - policy.servingFloor + 0.001
        return max(unservableAt, entry.retryAfter)
    }

    /// Makes sure the entry in `slot` is looked at no later than `at`.
    mutating func schedule(slot: Int, at: MonotonicInstant) {
        let current = table.update(slot: slot) { entry -> MonotonicInstant? in
            if entry.scheduled != .origin, entry.scheduled <= at { return entry.scheduled }
            entry.scheduled = at
            return nil
        }
        guard let current, current == nil else { return }
        due.push(at, slot: slot)
    }

    /// One scheduler pass at `now`: looks only at the entries whose record is due. Entries idle
    /// and no longer servable are forgotten; entries read within the idle time-out whose refresh
    /// is due are returned for a background refresh.
    mutating func takeDue(now: MonotonicInstant) -> [TokenKey] {
        if due.count > 2 * table.count + 1024 { rebuildDueQueue(at: now) }
        var records: [DueQueue.Record] = []
        while let record = due.popDue(at: now) { records.append(record) }
        var refresh: [TokenKey] = []
        for record in records {
            let slot = Int(record.slot)
            guard let (key, entry) = table.entry(inSlot: slot), entry.scheduled == record.at else { continue }
            let policy = runtime.policy(for: key.kind)
            table.update(slot: slot) { $0.scheduled = .origin }
            examined += 1
            let active = policy.isActive(lastRead: entry.lastRead, now: now)
            if entry.token.isHeld, !policy.isServable(remaining: entry.remaining(at: now)), let storage {
                // It leaves shared memory; the entry remembers only its fingerprint.
                if entry.token == .inStorage {
                    let fingerprint = fingerprint(entry, key: key) ?? "-"
                    table.update(slot: slot) { $0.token = .unservable(fingerprint: fingerprint) }
                }
                storage.tokenRemoved(kind: key.kind, id: key.tokenKey.id)
            }
            if !active, !policy.isServable(remaining: entry.remaining(at: now)), now >= entry.retryAfter {
                forget(key)
            } else if active, entry.token.isHeld, now >= entry.refreshAt, now >= entry.retryAfter,
                now >= entry.rejectedUntil
            {
                refresh.append(key.tokenKey)
                // Looked at again after the fetch is recorded, or in a second if none started.
                schedule(slot: slot, at: now + 1)
            } else {
                schedule(slot: slot, at: max(nextCheck(entry, kind: key.kind, now: now), now + 0.001))
            }
        }
        return refresh
    }

    /// After a step of the wall clock: each held token whose `exp`, by the wall clock `wall`,
    /// comes before its monotonic deadline has its whole timeline moved that much sooner (fetched,
    /// refresh, deadline: as if fetched that much earlier, so its lifetime, and with it the
    /// validity a GET needs, stays as issued), its shared-memory slot the new deadline (readers
    /// judge by it), and a look now (which starts its refresh, or takes it out of shared memory,
    /// when due). A step back moves nothing: a deadline never moves later. Returns how many moved.
    mutating func wallClockStepped(now: MonotonicInstant, wall: UnixTime) -> Int {
        var moved = 0
        for slot in table.slotsNewestFirst {
            guard let (key, entry) = table.entry(inSlot: slot), entry.token.isHeld else { continue }
            let byWall = now + (entry.unixExpiry - wall)
            guard byWall < entry.expiry else { continue }
            let sooner = entry.expiry - byWall
            var updated = entry
            updated.expiry = byWall
            updated.fetchedAt = updated.fetchedAt - sooner
            updated.refreshAt = updated.refreshAt - sooner
            if updated.token == .inStorage, let storage, let token = tokenText(entry, key: key) {
                let held = storage.tokenStored(
                    kind: key.kind,
                    id: key.tokenKey.id,
                    token: token,
                    expiry: updated.expiry,
                    lifetime: updated.lifetime,
                    unixExpiry: updated.unixExpiry
                )
                if !held { updated.token = .owned(token) }
            }
            table.update(slot: slot) { $0 = updated }
            schedule(slot: slot, at: now)
            moved += 1
        }
        return moved
    }

    /// Forgets every record and schedules every entry for `now`.
    mutating func rebuildDueQueue(at now: MonotonicInstant) {
        due.removeAll()
        for slot in table.slotsNewestFirst {
            table.update(slot: slot) { $0.scheduled = now }
            due.push(now, slot: slot)
        }
    }

    // MARK: Reload and hand-over

    /// Puts `runtime` in force, forgets the entries of the kinds in `moved`, and looks at every
    /// other entry at the next pass (the policy may have changed).
    mutating func install(_ runtime: EngineRuntime, moved: Set<String>, now: MonotonicInstant) {
        self.runtime = runtime
        if !moved.isEmpty {
            var gone: [EntryKey] = []
            table.forEachKey { key, _ in
                if moved.contains(key.kind) { gone.append(key) }
            }
            for key in gone { forget(key) }
        }
        rebuildDueQueue(at: now)
    }
}
