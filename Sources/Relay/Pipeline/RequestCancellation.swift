import FleetAuth
import Synchronization

/// Lets a partition revoke cancel a request under way: the revoke must not hand the
/// partition over while this member's request may still land after the next owner's.
/// The pipeline keeps one per request in flight; the worker runs the delivery through it.
public final class RequestCancellation: Sendable {
    /// The vehicle and partitions of the request, so a revoke finds the requests it concerns.
    public let vehicle: VehicleIdentity
    public let partitions: [PartitionGeneration]

    private enum State {
        case running
        /// The worker waits for either the delivery to end or a cancellation.
        case watching(CheckedContinuation<Void, Never>)
        case cancelled
        case ended
    }

    private let state = Mutex(State.running)

    init(vehicle: VehicleIdentity, partitions: [PartitionGeneration]) {
        self.vehicle = vehicle
        self.partitions = partitions
    }

    public var isCancelled: Bool {
        state.withLock { if case .cancelled = $0 { true } else { false } }
    }

    /// Cancels the delivery running through `run`, now or as soon as it starts.
    public func cancel() {
        let watcher: CheckedContinuation<Void, Never>? = state.withLock { state in
            switch state {
            case .running:
                state = .cancelled
                return nil
            case .watching(let continuation):
                state = .cancelled
                return continuation
            case .cancelled, .ended:
                return nil
            }
        }
        watcher?.resume()
    }

    /// Runs the delivery as a child task that a `cancel()` cancels; returns its result once
    /// it ended, so a cancelled request is over (connection closed, no retry pending) on return.
    public func run<Result: Sendable>(_ delivery: @escaping @Sendable () async -> Result) async -> Result {
        await withTaskGroup(of: Result.self) { group in
            group.addTask {
                let result = await delivery()
                self.end()
                return result
            }
            await watch()
            if isCancelled { group.cancelAll() }
            return await group.next()!
        }
    }

    /// Suspends until the delivery ended or was cancelled.
    private func watch() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let resumeNow = state.withLock { state in
                guard case .running = state else { return true }
                state = .watching(continuation)
                return false
            }
            if resumeNow { continuation.resume() }
        }
    }

    private func end() {
        let watcher: CheckedContinuation<Void, Never>? = state.withLock { state in
            defer { if case .cancelled = state {} else { state = .ended } }
            if case .watching(let continuation) = state { return continuation }
            return nil
        }
        watcher?.resume()
    }
}
