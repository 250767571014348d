import Dispatch
import Foundation
import Logging
import Synchronization

/// The first SIGTERM or SIGINT starts a graceful shutdown (ServiceLifecycle's
/// part); a second one means the operator will not wait: exit at once.
final class SecondSignalExit: @unchecked Sendable {  // dispatch sources are thread-safe and never reassigned
    /// Immutable after init; only cancelled in deinit.
    private let sources: [any DispatchSourceSignal]
    private let first: FirstSignal

    private final class FirstSignal: Sendable {
        let count = Atomic<Int>(0)
        let number = Atomic<Int32>(0)
    }

    /// - Parameter firstSignalMeans: what the first signal starts, logged as it comes.
    init(logger: Logger, firstSignalMeans: String? = nil) {
        let first = FirstSignal()
        self.first = first
        sources = [SIGTERM, SIGINT].map { signalNumber in
            let source = DispatchSource.makeSignalSource(signal: signalNumber, queue: .global())
            source.setEventHandler {
                guard first.count.add(1, ordering: .relaxed).newValue >= 2 else {
                    first.number.store(signalNumber, ordering: .relaxed)
                    if let firstSignalMeans { logger.warning("Signal \(signalNumber): \(firstSignalMeans) (again to exit at once)") }
                    return
                }
                logger.warning("Second signal: exiting without finishing in-flight work (it stays uncommitted)")
                exit(128 + signalNumber)
            }
            source.resume()
            return source
        }
    }

    /// The first signal received, if any.
    var received: Int32? {
        let number = first.number.load(ordering: .relaxed)
        return number == 0 ? nil : number
    }

    deinit {
        sources.forEach { $0.cancel() }
    }
}
