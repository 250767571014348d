import FleetAuth
import Synchronization

/// Lets a partition revoke cancel a request under way: the revoke must not hand the
/// partition over while this member's request may still land after the next owner's.
/// The pipeline keeps one per request in flight. A worker runs its loop as a child task
/// (see `WorkerWatch`); cancelling the request cancels that loop while it is on this
/// request, and only then, so no other request is ever hit. Nothing is created per
/// request but this object: a task per request costs more CPU than the request itself.
public final class RequestCancellation: Sendable {
    /// The vehicle and partitions of the request, so a revoke finds the requests it concerns.
    public let vehicle: VehicleIdentity
    public let partitions: [PartitionGeneration]

    private enum State {
        case waiting
        case running(WorkerWatch)
        case cancelled
        case ended
    }

    private let state = Mutex(State.waiting)

    init(vehicle: VehicleIdentity, partitions: [PartitionGeneration]) {
        self.vehicle = vehicle
        self.partitions = partitions
    }

    public var isCancelled: Bool {
        state.withLock { if case .cancelled = $0 { true } else { false } }
    }

    /// Cancels the request: at once if a worker is on it, else before it starts.
    public func cancel() {
        state.withLock { state in
            switch state {
            case .waiting:
                state = .cancelled
            case .running(let watch):
                state = .cancelled
                // Under the lock: the worker cannot have ended this request and moved on.
                watch.cancelWorker()
            case .cancelled, .ended:
                break
            }
        }
    }

    /// The worker watched by `watch` starts the request; false when it was cancelled already.
    public func begin(on watch: WorkerWatch) -> Bool {
        state.withLock { state in
            guard case .waiting = state else { return false }
            state = .running(watch)
            return true
        }
    }

    /// The worker is done with the request: a later `cancel()` no longer reaches it.
    public func end() {
        state.withLock { state in
            if case .running = state { state = .ended }
        }
    }
}

/// Watches one worker loop, run as a child task: its parent waits until the loop ended or a
/// revoke cancelled the request it was on, then cancels the loop and, unless the loop ended
/// for good, starts a fresh one.
public final class WorkerWatch: Sendable {
    private enum State {
        case running
        case watched(CheckedContinuation<Void, Never>)
        case fired
    }

    private let state = Mutex(State.running)

    public init() {}

    /// Suspends the parent until `cancelWorker()` or `loopEnded()`.
    public func wait() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let resumeNow = state.withLock { state in
                guard case .running = state else { return true }
                state = .watched(continuation)
                return false
            }
            if resumeNow { continuation.resume() }
        }
    }

    /// Whether the loop was cancelled (or ended): it takes no further request.
    public var hasFired: Bool {
        state.withLock { if case .fired = $0 { true } else { false } }
    }

    func cancelWorker() { fire() }

    public func loopEnded() { fire() }

    private func fire() {
        let continuation: CheckedContinuation<Void, Never>? = state.withLock { state in
            defer { state = .fired }
            if case .watched(let continuation) = state { return continuation }
            return nil
        }
        continuation?.resume()
    }
}
