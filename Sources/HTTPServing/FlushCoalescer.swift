import NIOCore

/// Hands what a connection writes between two flushes to TLS as one buffer. NIOSSL seals each
/// write in a TLS record of its own, and SwiftNIO's HTTP/2 writes each frame apart, so an
/// answer left in three or four records (headers, body, the end of the stream), each read,
/// decrypted and buffered on its own by the client. Production front ends seal what they
/// flush together in as few records as its size allows; the emulators answer the same way.
final class FlushCoalescer: ChannelOutboundHandler {
    typealias OutboundIn = IOData
    typealias OutboundOut = IOData

    private var pending: ByteBuffer?
    /// The first pending write's promise, completed once the pending bytes were written; the
    /// later writes' promises follow it.
    private var pendingPromise: EventLoopPromise<Void>?

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        guard case .byteBuffer(var buffer) = unwrapOutboundIn(data) else {
            // A file region (never written here) keeps its place after what came before it.
            writePending(context)
            return context.write(data, promise: promise)
        }
        if pending == nil {
            pending = buffer
        } else {
            pending!.writeBuffer(&buffer)
        }
        guard let promise else { return }
        if let pendingPromise {
            pendingPromise.futureResult.cascade(to: promise)
        } else {
            pendingPromise = promise
        }
    }

    func flush(context: ChannelHandlerContext) {
        writePending(context)
        context.flush()
    }

    func close(context: ChannelHandlerContext, mode: CloseMode, promise: EventLoopPromise<Void>?) {
        // Unflushed writes fail when the output closes, as the channel's own do.
        if mode != .input {
            pending = nil
            pendingPromise.take()?.fail(ChannelError.ioOnClosedChannel)
        }
        context.close(mode: mode, promise: promise)
    }

    private func writePending(_ context: ChannelHandlerContext) {
        guard let buffer = pending.take() else { return }
        context.write(wrapOutboundOut(.byteBuffer(buffer)), promise: pendingPromise.take())
    }
}
