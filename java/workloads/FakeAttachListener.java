/**
 * Stands in for a JVM's attach listener, to test what the attach client trusts. It listens on a
 * UNIX socket at SOCKET_PATH ("own" for /tmp/.java_pid of its own pid), prints "ready", and
 * reports on its standard output what each connection sent ("received ..."). With "silent" it
 * closes each connection without a reply; with "flood" it answers with a status line followed by
 * up to FLOOD_BYTES more, until the client stops reading ("sent N"). When its standard input
 * closes it removes the socket, prints "connections N" and exits.
 *
 * Usage: java FakeAttachListener SOCKET_PATH|own silent|flood
 */
import java.io.IOException;
import java.io.InputStream;
import java.net.StandardProtocolFamily;
import java.net.UnixDomainSocketAddress;
import java.nio.ByteBuffer;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.concurrent.atomic.AtomicInteger;

public class FakeAttachListener {
    /** Far more than any attach reply; a bound only so that a client without one fails fast. */
    static final long FLOOD_BYTES = 64L << 20;

    public static void main(String[] args) throws Exception {
        Path socket = args[0].equals("own")
                ? Path.of("/tmp/.java_pid" + ProcessHandle.current().pid())
                : Path.of(args[0]);
        boolean flood = args[1].equals("flood");
        ServerSocketChannel server = ServerSocketChannel.open(StandardProtocolFamily.UNIX);
        Files.deleteIfExists(socket);
        server.bind(UnixDomainSocketAddress.of(socket));
        AtomicInteger connections = new AtomicInteger();
        Thread acceptor = new Thread(() -> {
            while (true) {
                try (SocketChannel client = server.accept()) {
                    connections.incrementAndGet();
                    serve(client, flood);
                } catch (IOException e) {
                    return;
                }
            }
        });
        acceptor.setDaemon(true);
        acceptor.start();
        System.out.println("ready");
        System.out.flush();
        InputStream stdin = System.in;
        while (stdin.read() >= 0) {
        }
        Files.deleteIfExists(socket);
        System.out.println("connections " + connections.get());
        System.out.flush();
        System.exit(0);
    }

    /** Reads one request (protocol, command and three arguments: five NULs) and answers it. */
    static void serve(SocketChannel client, boolean flood) throws IOException {
        ByteBuffer buffer = ByteBuffer.allocate(8192);
        int nuls = 0;
        while (nuls < 5 && buffer.hasRemaining()) {
            int from = buffer.position();
            if (client.read(buffer) < 0) {
                break;
            }
            for (int i = from; i < buffer.position(); i++) {
                if (buffer.get(i) == 0) {
                    nuls++;
                }
            }
        }
        byte[] request = Arrays.copyOf(buffer.array(), buffer.position());
        String shown = new String(request, StandardCharsets.UTF_8).replace('\0', '|');
        synchronized (System.out) {
            System.out.println("received " + shown);
            System.out.flush();
        }
        if (!flood) {
            return;
        }
        long sent = 0;
        try {
            client.write(ByteBuffer.wrap("0\n".getBytes(StandardCharsets.UTF_8)));
            byte[] chunk = new byte[64 << 10];
            Arrays.fill(chunk, (byte) 'x');
            while (sent < FLOOD_BYTES) {
                ByteBuffer block = ByteBuffer.wrap(chunk);
                while (block.hasRemaining()) {
                    sent += client.write(block);
                }
            }
        } catch (IOException e) {
            // The client stopped reading and closed: what was sent until then is the answer.
        }
        synchronized (System.out) {
            System.out.println("sent " + sent);
            System.out.flush();
        }
    }
}
