import Synchronization

/// Set by the pipeline's state when a partition's assignment generation ends (its revoke
/// began, or it was assigned anew): a request under way on its records reads it between the
/// steps of its attempt, without taking the pipeline's lock, and sends nothing more.
public final class Revocation: Sendable {
    private let revoked = Atomic<Bool>(false)

    public init() {}

    public var isSet: Bool { revoked.load(ordering: .acquiring) }

    func set() {
        revoked.store(true, ordering: .releasing)
    }
}
