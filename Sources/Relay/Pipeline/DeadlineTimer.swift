/// Whether the timer of the state machine's deadlines sleeps, and until when: an event that
/// sets an earlier deadline must wake it, and only then.
struct DeadlineTimer {
    /// nil: the timer is awake (it reads the next deadline before it sleeps again).
    private var sleepsUntil: ContinuousClock.Instant?

    /// The timer goes to sleep until `deadline`.
    mutating func sleep(until deadline: ContinuousClock.Instant) -> ContinuousClock.Instant {
        sleepsUntil = deadline
        return deadline
    }

    mutating func woke() {
        sleepsUntil = nil
    }

    /// Whether something due at `due` must wake the timer: it sleeps past it. It then counts as
    /// sleeping until `due`, so that later deadlines do not ring it again.
    mutating func mustWake(for due: ContinuousClock.Instant) -> Bool {
        guard let sleepsUntil, due < sleepsUntil else { return false }
        self.sleepsUntil = due
        return true
    }
}
