import CRdKafka
import Logging

/// State a librdkafka client's C callbacks reach through the handle's opaque
/// pointer. Subclasses add what their callbacks need. Retained by the owning
/// Swift client for as long as the handle lives.
package class RDKafkaClientContext: @unchecked Sendable {  // subclasses document what they guard
    let logger: Logger
    /// Commits under way and their answers (consumers only).
    let commitAnswers = CommitAnswers()

    /// Internal: a package-visible initializer of this subclassed class gets an entry in its
    /// vtable, which a subclass with initializers of its own (`ConsumerContext`) fills with a
    /// thunk calling itself. Other modules take `plain(logger:)`.
    init(logger: Logger) {
        self.logger = logger
    }

    /// A context with nothing beside the logger, for a client whose callbacks need no more.
    package static func plain(logger: Logger) -> RDKafkaClientContext {
        RDKafkaClientContext(logger: logger)
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
