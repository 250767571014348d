import NIOCore
import NIOHTTP2

/// Reads the stream IDs of the HEADERS frames a client sends, before SwiftNIO's HTTP/2 layer
/// sees them: that layer drops the streams a client opens above a GOAWAY's last stream ID
/// without telling the streams' handlers, and a server that counts what it left unprocessed
/// (the emulator) must see them too. Only frame headers are read; every byte passes on as it came.
final class HTTP2StreamStarts: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer

    /// The client connection preface that comes before the first frame (RFC 9113 §3.4).
    private static let prefaceLength = 24
    private static let frameHeaderLength = 9
    private static let headersType: UInt8 = 0x1

    private let observer: any HTTP2ConnectionObserver
    private var prefaceLeft = prefaceLength
    /// Bytes of the current frame header read so far.
    private var header: [UInt8] = []
    /// Payload bytes of the current frame still to pass.
    private var payloadLeft = 0

    init(observer: any HTTP2ConnectionObserver) {
        self.observer = observer
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        var bytes = unwrapInboundIn(data)
        let passed = bytes
        while bytes.readableBytes > 0 {
            if prefaceLeft > 0 {
                let skipped = min(prefaceLeft, bytes.readableBytes)
                bytes.moveReaderIndex(forwardBy: skipped)
                prefaceLeft -= skipped
            } else if payloadLeft > 0 {
                let skipped = min(payloadLeft, bytes.readableBytes)
                bytes.moveReaderIndex(forwardBy: skipped)
                payloadLeft -= skipped
            } else {
                let taken = min(Self.frameHeaderLength - header.count, bytes.readableBytes)
                header += bytes.readBytes(length: taken) ?? []
                if header.count == Self.frameHeaderLength { frameHeaderRead() }
            }
        }
        context.fireChannelRead(wrapInboundOut(passed))
    }

    private func frameHeaderRead() {
        payloadLeft = Int(header[0]) << 16 | Int(header[1]) << 8 | Int(header[2])
        if header[3] == Self.headersType {
            let id = (Int(header[5]) << 24 | Int(header[6]) << 16 | Int(header[7]) << 8 | Int(header[8])) & 0x7FFF_FFFF
            observer.headersArrived(on: HTTP2StreamID(id))
        }
        header = []
    }
}
