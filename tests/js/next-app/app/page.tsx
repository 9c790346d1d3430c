// app/page.tsx: a new chat gets an id of its own, in the address.
import { redirect } from 'next/navigation';

export const dynamic = 'force-dynamic'; // a new id for every visit, not one fixed at build time

export default function Home() {
  redirect(`/chat/${crypto.randomUUID()}`);
}
