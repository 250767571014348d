/// An error from librdkafka or from this wrapper, with a message fit for one log line.
public struct KafkaError: Error, Sendable, CustomStringConvertible {
    public enum Kind: Sendable {
        case configuration
        case client
        case produce
        case commit
        case query
        case mockCluster
    }

    public let kind: Kind
    public let message: String
    /// librdkafka's error code, when librdkafka reported the error.
    public let code: Int32?

    public init(_ kind: Kind, _ message: String, code: Int32? = nil) {
        self.kind = kind
        self.message = message
        self.code = code
    }

    public var description: String { message }

    /// Retrying cannot help until an operator acts: the topic is missing, access is not
    /// granted, or the record is larger than the broker takes.
    public var isPermanent: Bool { code.map(RDKafkaErrorCodes.isPermanent) ?? false }

    /// librdkafka's short name of the error code (`UNKNOWN_TOPIC_OR_PART`), for logs and readiness.
    public var codeName: String? { code.map(RDKafkaErrorCodes.name) }
}
