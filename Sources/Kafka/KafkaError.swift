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

    public init(_ kind: Kind, _ message: String) {
        self.kind = kind
        self.message = message
    }

    public var description: String { message }
}
