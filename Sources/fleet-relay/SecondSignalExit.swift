import Dispatch
import Foundation
import Logging
import Synchronization

/// The first SIGTERM or SIGINT starts a graceful shutdown (ServiceLifecycle's
/// part); a second one means the operator will not wait: exit at once.
final class SecondSignalExit: @unchecked Sendable {  // dispatch sources are thread-safe and never reassigned
    /// Immutable after init; only cancelled in deinit.
    private let sources: [any DispatchSourceSignal]

    private final class Count: Sendable {
        let value = Atomic<Int>(0)
    }

    init(logger: Logger) {
        let count = Count()
        sources = [SIGTERM, SIGINT].map { signalNumber in
            let source = DispatchSource.makeSignalSource(signal: signalNumber, queue: .global())
            source.setEventHandler {
                guard count.value.add(1, ordering: .relaxed).newValue >= 2 else { return }
                logger.warning("Second signal: exiting without finishing in-flight work (it stays uncommitted)")
                exit(128 + signalNumber)
            }
            source.resume()
            return source
        }
    }

    deinit {
        sources.forEach { $0.cancel() }
    }
}
