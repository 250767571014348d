import Dispatch

/// Runs blocking librdkafka calls (commits, offset and metadata queries) on a
/// serial dispatch queue, so they never occupy a Swift concurrency thread.
struct BlockingCallQueue: Sendable {
    private let queue: DispatchQueue

    init(label: String) {
        queue = DispatchQueue(label: label)
    }

    func run<T: Sendable>(_ work: @escaping @Sendable () throws(KafkaError) -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            queue.async {
                do throws(KafkaError) {
                    continuation.resume(returning: try work())
                } catch {
                    continuation.resume(throwing: error)
                }
            }
        }
    }
}
