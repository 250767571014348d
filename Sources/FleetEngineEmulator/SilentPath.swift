import NIOCore
import Synchronization

/// A network path that goes silent: what a NAT or load balancer does when it forgets a
/// connection without a word. Connections open when `silenceOpenConnections` is called stop
/// passing bytes either way but stay open; connections made afterwards work.
public final class SilentPath: Sendable {
    private let epoch = Atomic(0)

    public init() {}

    /// Every connection open now goes silent for good.
    public func silenceOpenConnections() {
        epoch.add(1, ordering: .sequentiallyConsistent)
    }

    /// Puts the path at the network end of a new connection.
    @Sendable public func prepare(_ channel: any Channel) throws {
        try channel.pipeline.syncOperations.addHandler(Handler(path: self, bornIn: epoch.load(ordering: .sequentiallyConsistent)),
                                                       position: .first)
    }

    fileprivate func isSilenced(bornIn: Int) -> Bool {
        epoch.load(ordering: .sequentiallyConsistent) > bornIn
    }

    private final class Handler: ChannelDuplexHandler {
        typealias InboundIn = ByteBuffer
        typealias OutboundIn = ByteBuffer

        private let path: SilentPath
        private let bornIn: Int

        init(path: SilentPath, bornIn: Int) {
            self.path = path
            self.bornIn = bornIn
        }

        private var silent: Bool { path.isSilenced(bornIn: bornIn) }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            guard !silent else { return }
            context.fireChannelRead(data)
        }

        /// What the server writes into a silent path is lost on the way, as far as it can tell.
        func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
            guard !silent else {
                promise?.succeed()
                return
            }
            context.write(data, promise: promise)
        }
    }
}
