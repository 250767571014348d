/// Callers waiting for a value that another caller is producing in its own task: single
/// flight without a task that outlives its callers. Its owner (an actor, or a lock) keeps one per value being
/// produced and resumes every waiter once the producer is done.
public struct WaitingCallers<Value: Sendable>: Sendable {
    public enum Outcome: Sendable {
        case value(Value)
        case failure(any Error)
        /// The producer was cancelled, or what it produced is gone: look again.
        case lookAgain
    }

    private var continuations: [CheckedContinuation<Outcome, Never>] = []

    public init() {}

    public var count: Int { continuations.count }

    public mutating func append(_ continuation: CheckedContinuation<Outcome, Never>) {
        continuations.append(continuation)
    }

    /// Resumes every waiter with `outcome`; the list is empty afterwards.
    public mutating func resumeAll(_ outcome: Outcome) {
        let waiting = continuations
        continuations = []
        for continuation in waiting { continuation.resume(returning: outcome) }
    }
}
