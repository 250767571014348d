import Logging
import Relay
import Synchronization

/// The replay's commit sink: writes the checkpoint for each commit order of the state machine,
/// one at a time, off the pipeline's lock (a durable write takes milliseconds), and answers
/// the order once saved.
final class CheckpointSaver: CommitSink {
    private typealias Submission = (order: CommitOrder, answer: @Sendable (String?) -> Void)
    private let submissions: AsyncStream<Submission>
    private let submitter: AsyncStream<Submission>.Continuation
    private let saved: Mutex<ReplayCheckpoint>
    private let save: @Sendable (ReplayCheckpoint) throws -> Void
    private let logger: Logger

    init(checkpoint: ReplayCheckpoint, save: @escaping @Sendable (ReplayCheckpoint) throws -> Void, logger: Logger) {
        (submissions, submitter) = AsyncStream.makeStream()
        saved = Mutex(checkpoint)
        self.save = save
        self.logger = logger
    }

    /// The checkpoint as last recorded.
    var checkpoint: ReplayCheckpoint { saved.withLock { $0 } }

    /// Takes an order; never blocks (the state machine orders one commit at a time).
    func submit(_ order: CommitOrder, answer: @escaping @Sendable (String?) -> Void) -> String? {
        submitter.yield((order, answer))
        return nil
    }

    func finish() {
        submitter.finish()
    }

    func run() async {
        for await (order, answer) in submissions {
            let checkpoint = saved.withLock { checkpoint in
                checkpoint.recordFinished(order.offsets, of: checkpoint.topic)
                return checkpoint
            }
            do {
                try save(checkpoint)
                answer(nil)
            } catch {
                logger.error("Checkpoint not saved: \(error)")
                answer("\(error)")
            }
        }
    }
}
