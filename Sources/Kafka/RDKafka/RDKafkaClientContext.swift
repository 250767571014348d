import CRdKafka
import Logging

/// State a librdkafka client's C callbacks reach through the handle's opaque
/// pointer. Subclasses add what their callbacks need. Retained by the owning
/// Swift client for as long as the handle lives.
package class RDKafkaClientContext: @unchecked Sendable {  // subclasses document what they guard
    let logger: Logger
    /// Commits under way and their answers (consumers only).
    let commitAnswers = CommitAnswers()

    package init(logger: Logger) {
        self.logger = logger
    }

    static func from(_ handle: OpaquePointer) -> RDKafkaClientContext? {
        guard let opaque = rd_kafka_opaque(handle) else { return nil }
        return Unmanaged<RDKafkaClientContext>.fromOpaque(opaque).takeUnretainedValue()
    }

    func attach(to conf: OpaquePointer) {
        rd_kafka_conf_set_opaque(conf, Unmanaged.passUnretained(self).toOpaque())
        RDKafkaLogging.install(on: conf)
    }
}
