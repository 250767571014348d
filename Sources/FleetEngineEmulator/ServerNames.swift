import NIOCore
import NIOTLS
import Synchronization

/// Records the server name (SNI) each TLS client asks for, read from its ClientHello before
/// TLS begins: the test of a client that must name the host it means.
public final class ServerNames: Sendable {
    private let seen = Mutex<[String?]>([])

    public init() {}

    /// One entry per TLS connection: the name asked for, or nil when the client sent none.
    public var requested: [String?] { seen.withLock { $0 } }

    /// Puts the reader at the network end of a new connection; it leaves once it has read the ClientHello.
    @Sendable public func prepare(_ channel: any Channel) throws {
        let handler = ByteToMessageHandler(SNIHandler { [self] result in
            record(result)
            return channel.eventLoop.makeSucceededVoidFuture()
        })
        try channel.pipeline.syncOperations.addHandler(handler, position: .first)
    }

    private func record(_ result: SNIResult) {
        switch result {
        case .hostname(let name): seen.withLock { $0.append(name) }
        case .fallback: seen.withLock { $0.append(nil) }
        }
    }
}
