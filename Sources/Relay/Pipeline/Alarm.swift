import Synchronization

/// Lets one task sleep until a deadline or until another rings, whichever comes first.
/// A ring while nobody sleeps makes the next sleep return at once, so a deadline set
/// between reading the next deadline and going to sleep is never missed.
final class Alarm: Sendable {
    private struct State {
        var rung = false
        var cancelled = false
        var sleeper: CheckedContinuation<Void, Never>?
    }

    private let state = Mutex(State())

    func ring() {
        let sleeper = state.withLock { state in
            guard let sleeper = state.sleeper else {
                state.rung = true
                return nil as CheckedContinuation<Void, Never>?
            }
            state.sleeper = nil
            return sleeper
        }
        sleeper?.resume()
    }

    /// Returns at the deadline, on a ring, or when the task is cancelled.
    func sleep(until deadline: ContinuousClock.Instant) async {
        await withTaskGroup(of: Void.self) { group in
            group.addTask { try? await Task.sleep(until: deadline, clock: .continuous) }
            group.addTask { await self.waitForRing() }
            await group.next()
            group.cancelAll()
        }
    }

    private func waitForRing() async {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let returnNow = state.withLock { state in
                    defer { (state.rung, state.cancelled) = (false, false) }
                    guard !state.rung, !state.cancelled else { return true }
                    state.sleeper = continuation
                    return false
                }
                if returnNow { continuation.resume() }
            }
        } onCancel: {
            let sleeper = state.withLock { state in
                guard let sleeper = state.sleeper else {
                    state.cancelled = true
                    return nil as CheckedContinuation<Void, Never>?
                }
                state.sleeper = nil
                return sleeper
            }
            sleeper?.resume()
        }
    }
}
